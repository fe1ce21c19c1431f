#!/usr/bin/python3
"""zero's fused CPU Adam step next to torch.optim.Adam on the same number of threads.

    /usr/bin/python3 bench/optim/compare_torch.py --bench build/release/bench/optim/zero_bench_optim

Needs Debian's python3-torch (PyTorch 1.13). Measures, on --params parameters with --threads
threads:
  - torch.optim.Adam on fp32 parameters and gradients (its default single-tensor implementation),
  - the PyTorch fp16 step that zero's fused step replaces: unscale the half gradients into fp32
    master gradients, torch.optim.Adam, copy the master weights to the half model,
  - zero_bench_optim's adam_step_vs_triad (OMP_NUM_THREADS=--threads): the fused step with half
    gradients and a half copy, alternating with a STREAM triad in the same process.
The bandwidth a virtual machine gets changes with its neighbours, so the script alternates
PyTorch and zero for --rounds rounds and prints every round's ratios and their medians.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def best_rate(params, steps, step):
    step()  # the first step allocates the optimizer state
    best = float("inf")
    for _ in range(steps):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return params / best


def torch_adam(params, steps):
    import torch

    weights = torch.nn.Parameter(torch.full((params,), 0.5))
    weights.grad = torch.full((params,), 0.01)
    optimizer = torch.optim.Adam([weights], lr=1e-3)
    return best_rate(params, steps, optimizer.step)


def torch_fp16_step(params, steps):
    import torch

    master = torch.nn.Parameter(torch.full((params,), 0.5))
    model = torch.full((params,), 0.5, dtype=torch.float16)
    grad16 = torch.full((params,), 10.0, dtype=torch.float16)
    master.grad = torch.empty(params)
    optimizer = torch.optim.Adam([master], lr=1e-3)

    def step():
        torch.mul(grad16, 1.0 / 1024, out=master.grad)
        optimizer.step()
        model.copy_(master.detach())

    return best_rate(params, steps, step)


def zero_step(bench, params, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(
        [bench, "--params=%d" % params, "--benchmark_filter=adam_step_vs_triad",
         "--benchmark_min_time=1", "--benchmark_format=json"],
        check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)["benchmarks"][0]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="path to zero_bench_optim")
    parser.add_argument("--params", type=int, default=64 << 20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="PyTorch steps per measurement (best)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("compare_torch.py needs PyTorch (Debian: apt install python3-torch; run /usr/bin/python3)")
    torch.set_num_threads(args.threads)

    print("%d parameters, %d threads, torch %s" % (args.params, args.threads, torch.__version__))
    print("| round | torch Adam Mparams/s | torch fp16 step Mparams/s | zero fused Mparams/s | zero GB/s | "
          "triad GB/s | zero / triad | zero / torch Adam | zero / torch fp16 step |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios_adam, ratios_fp16, fractions = [], [], []
    for round_ in range(1, args.rounds + 1):
        adam = torch_adam(args.params, args.steps)
        fp16 = torch_fp16_step(args.params, args.steps)
        z = zero_step(args.bench, args.params, args.threads)
        rate = z["items_per_second"]
        ratios_adam.append(rate / adam)
        ratios_fp16.append(rate / fp16)
        fractions.append(z["fraction_of_triad"])
        print("| %d | %.0f | %.0f | %.0f | %.1f | %.1f | %.2f | %.1fx | %.1fx |"
              % (round_, adam / 1e6, fp16 / 1e6, rate / 1e6, z["bytes_per_second"] / 1e9,
                 z["triad_bytes_per_second"] / 1e9, z["fraction_of_triad"], rate / adam, rate / fp16))
    print("median: zero / triad %.2f, zero / torch.optim.Adam %.1fx, zero / torch fp16 step %.1fx"
          % (statistics.median(fractions), statistics.median(ratios_adam), statistics.median(ratios_fp16)))


if __name__ == "__main__":
    main()
