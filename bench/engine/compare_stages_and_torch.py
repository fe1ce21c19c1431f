#!/usr/bin/env python3
"""Step time of zero's stages 0-3 and of PyTorch DDP + ZeroRedundancyOptimizer (gloo) on the same
MLP, batch and world size, measured in one run (ratios, not absolute times, are what carry over).

    compare_stages_and_torch.py --train-mlp build/release/examples/train_mlp/train_mlp

Defaults: 2 ranks, 1 thread each, an MLP of 1024,2048x5,1024 (about 21M parameters), global batch
16, Adam, fp32. Prints a Markdown table (docs/engine-performance.md keeps the last one).
Needs numpy; the PyTorch row needs torch (Debian: python3-numpy, python3-torch).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def zero_step_times(args, stage, directory):
    out = os.path.join(directory, f"stage{stage}.json")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS=str(args.threads))
    command = [args.mpirun, "-np", str(args.ranks), "--oversubscribe", args.train_mlp, "--stage", str(stage),
               "--layers", args.layers, "--steps", str(args.steps + args.warmup), "--batch", str(args.batch),
               "--bucket", str(args.bucket), "--json", out, "--print-every", "1000000"]
    subprocess.run(command, env=env, check=True, capture_output=True)
    with open(out) as f:
        data = json.load(f)
    times = data["step_seconds"][args.warmup:]
    hidden = [c["hidden_fraction"] for c in data["communication_per_step"][args.warmup:]]
    return statistics.median(times), statistics.mean(hidden), data


def torch_worker(rank, args, directory, result):
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{directory}/rendezvous", rank=rank, world_size=args.ranks)
    widths = [int(w) for w in args.layers.split(",")]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.Tanh())
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    share = args.batch // args.ranks
    x = torch.randn(share, widths[0])
    y = torch.randn(share, widths[-1])
    times = []
    for step in range(args.steps + args.warmup):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        elapsed = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if step >= args.warmup:
            times.append(float(elapsed))
    if rank == 0:
        with open(result, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mlp", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", default="1024,2048,2048,2048,2048,2048,1024")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--bucket", type=int, default=4_000_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    widths = [int(w) for w in args.layers.split(",")]
    params = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))

    rows = []
    with tempfile.TemporaryDirectory() as directory:
        times = {}
        for stage in range(4):
            t, hidden, _ = zero_step_times(args, stage, directory)
            times[stage] = t
            rows.append((f"zero stage {stage}", t, hidden))
        torch_time = None
        try:
            import torch.multiprocessing as mp
            result = os.path.join(directory, "torch.json")
            mp.spawn(torch_worker, args=(args, directory, result), nprocs=args.ranks, join=True)
            with open(result) as f:
                torch_time = statistics.median(json.load(f))
        except ImportError:
            print("torch is not installed: no PyTorch row", file=sys.stderr)

    print(f"MLP {args.layers} ({params / 1e6:.1f}M parameters), global batch {args.batch}, {args.ranks} ranks x "
          f"{args.threads} thread(s), Adam, fp32; median of {args.steps} steps after {args.warmup} warm-up\n")
    print("| run | step time (ms) | vs zero stage 0 | reduction hidden behind backward |")
    print("|---|---|---|---|")
    for name, t, hidden in rows:
        print(f"| {name} | {t * 1e3:.1f} | {t / times[0]:.2f}x | {hidden * 100:.0f}% |")
    if torch_time is not None:
        print(f"| PyTorch DDP + ZeroRedundancyOptimizer (gloo) | {torch_time * 1e3:.1f} | {torch_time / times[0]:.2f}x | |")
        print(f"\nzero stage 1 is {torch_time / times[1]:.2f}x faster per step than PyTorch's ZeRO-1 equivalent; "
              f"stage 3 {torch_time / times[3]:.2f}x.")


if __name__ == "__main__":
    main()
