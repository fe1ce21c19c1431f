#!/usr/bin/env python3
"""torch.optim.Adam(fused=True) on a CUDA device next to a device-to-device copy of the same bytes:
the torch side of bench/optim/gpu_adam_bench.cpp (zero_bench_optim_gpu), in the same units, so
that zero / torch ratios can be read off the two reports.

    python3 tools/gpu_adam_torch.py [--elements 16777216,268435456] [--reps 50] [--warmup 5]
                                    [--rounds 5]

One parameter tensor of n fp32 elements with an fp32 gradient: torch's fused Adam has no 16-bit
gradients nor a 16-bit compute copy (zero's step reads bf16/fp16 gradients and writes the copy).
Bytes per element, 28, the same count as zero's step by coincidence of the layouts: read param 4
+ grad 4 + exp_avg 4 + exp_avg_sq 4 (16), write param 4 + exp_avg 4 + exp_avg_sq 4 (12); the
per-tensor step counter is not counted. The copy is dst.copy_(src) of 14 bytes per element,
counted read + write (28), as zero_bench_optim_gpu counts its cudaMemcpyAsync. After `warmup`
untimed pairs, each of `rounds` rounds times `reps` optimizer.step() calls back to back between
two CUDA events, then `reps` copies back to back between two others, and divides by `reps`: the
per-step and per-copy times. Every round is queued before the host synchronizes once at the end,
so neither a launch gap after an idle GPU nor optimizer.step()'s Python overhead is timed while
the GPU keeps ahead of the host. GB/s (10^9 bytes) and elements/s come from the median round (the
minimum is printed too). Exits 0 with a "skipped:" line when torch or CUDA is absent.
"""

import argparse
import statistics
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", default="16777216,268435456",
                        help="comma-separated parameter sizes (default: 2^24, 2^28)")
    parser.add_argument("--reps", type=int, default=50,
                        help="steps (and copies) timed back to back per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of `reps` steps and `reps` copies; median and min of these")
    args = parser.parse_args()
    if args.reps < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--reps and --rounds must be >= 1, --warmup >= 0")
    sizes = [int(s) for s in args.elements.split(",") if s]

    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print(f"skipped: torch not importable ({type(e).__name__})")
        return 0
    if not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no CUDA device")
        return 0

    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    print("bytes per element: step 28 = read param 4 + grad 4 + exp_avg 4 + exp_avg_sq 4, "
          "write param 4 + exp_avg 4 + exp_avg_sq 4 (fp32 params and grads); copy: "
          "dst.copy_(src) of 14 per element, counted read + write = 28")
    for n in sizes:
        needed = n * 44  # param, grad, 2 moments: 16; copy source and destination: 28
        free, _ = torch.cuda.mem_get_info(device)
        if needed > 0.95 * free:
            print(f"skipped n={n}: needs {needed / 1e9:.1f} GB of device memory, "
                  f"{free / 1e9:.1f} GB free")
            continue
        param = torch.nn.Parameter(torch.rand(n, device=device) * 2 - 1)
        param.grad = torch.randn(n, device=device) * 1e-2
        optimizer = torch.optim.Adam([param], lr=1e-3, fused=True)
        source = torch.empty(n * 14, dtype=torch.uint8, device=device).fill_(0x3C)
        destination = torch.empty_like(source)
        for _ in range(args.warmup):
            optimizer.step()
            destination.copy_(source)
        # Per round: e[0] .. `reps` steps .. e[1] .. `reps` copies .. e[2]; no sync until the end.
        rounds = [[torch.cuda.Event(enable_timing=True) for _ in range(3)]
                  for _ in range(args.rounds)]
        for events in rounds:
            events[0].record()
            for _ in range(args.reps):
                optimizer.step()
            events[1].record()
            for _ in range(args.reps):
                destination.copy_(source)
            events[2].record()
        rounds[-1][2].synchronize()
        step_ms = [e[0].elapsed_time(e[1]) / args.reps for e in rounds]
        copy_ms = [e[1].elapsed_time(e[2]) / args.reps for e in rounds]
        step, copy = statistics.median(step_ms), statistics.median(copy_ms)
        step_gbs = 28 * n / (step * 1e-3) / 1e9
        copy_gbs = 28 * n / (copy * 1e-3) / 1e9
        print(f"result torch-adam-fused fp32 n={n} reps={args.reps}x{args.rounds}: step {step:.3f} ms "
              f"(min {min(step_ms):.3f}) {step_gbs:.1f} GB/s {n / (step * 1e-3) / 1e9:.2f} Gelem/s"
              f" | copy {copy:.3f} ms (min {min(copy_ms):.3f}) {copy_gbs:.1f} GB/s"
              f" | ratio {step_gbs / copy_gbs:.3f}")
        del param, optimizer, source, destination
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
