#!/usr/bin/env python3
"""train_mlp's model in torch on the same GPU: the yardstick of `train_mlp --device cuda`'s step
(the goal: its stage 0 at least as fast as the same MLP in torch with fused Adam).

The same layers (torch.nn.Linear, tanh between them, MSE), the same batch, Adam(fused=True), in
fp32 with TF32 off: train_mlp widens its bf16 weights and multiplies in fp32 without TF32, so both
do the same products. Each step ends with loss.item(), as train_mlp reads each step's loss. Prints
the median step time over the steps after the warm-up, and writes it as JSON to --out for
tools/gpu_train_mlp.py. Run by tools/zero-gpu-check (step mlp-torch); exits 0 with a "skipped:"
line where torch or CUDA is absent.
"""
import argparse
import json
import os
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="1024,4096,4096,4096,1024")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    logs = os.environ.get("ZERO_GPU_CHECK_LOGS")
    p.add_argument("--out", default=logs and os.path.join(logs, "mlp-torch.json"),
                   help="JSON with the median step time (default: "
                        "$ZERO_GPU_CHECK_LOGS/mlp-torch.json)")
    a = p.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"skipped: torch does not import ({e})")
        return 0
    if not torch.cuda.is_available():
        print("skipped: torch sees no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    widths = [int(w) for w in a.layers.split(",")]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    generator = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(a.batch, widths[0], device="cuda", generator=generator)
    y = torch.randn(a.batch, widths[-1], device="cuda", generator=generator)
    seconds = []
    for _ in range(a.warmup + a.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds[a.warmup:])
    params = sum(t.numel() for t in model.parameters())
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"result torch-mlp fp32 layers={a.layers} batch={a.batch} params={params}: "
          f"step {median * 1e3:.3f} ms (median of {a.steps} after {a.warmup} warm-up)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"layers": a.layers, "batch": a.batch, "step_seconds_median": median,
                       "torch": torch.__version__}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
