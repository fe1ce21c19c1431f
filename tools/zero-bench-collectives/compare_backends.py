#!/usr/bin/env python3
"""zero's MpiCommunicator against plain Open MPI, measured in one run: both backends alternate,
several rounds, and the median bus bandwidth of each (op, size, in/out of place) is compared.

    compare_backends.py --bench build/release/tools/zero-bench-collectives/zero-bench-collectives

Prints a Markdown table (docs/collective-benchmark.md keeps the last one).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def run(args, backend, op, path):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = [args.mpirun, "-np", str(args.ranks), "--oversubscribe", args.bench, "-b", args.min, "-e", args.max,
               "-f", str(args.factor), "-n", str(args.iters), "-w", str(args.warmup), "-c", "1", "--op", op,
               "--backend", backend, "--json", path]
    subprocess.run(command, env=env, check=True, capture_output=True)
    with open(path) as f:
        return json.load(f)["results"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--ops", default="all_reduce,reduce_scatter,all_gather")
    parser.add_argument("--min", default="1M")
    parser.add_argument("--max", default="256M")
    parser.add_argument("--factor", type=int, default=16)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    samples = {}  # (op, size, placement, backend) -> [busbw]
    wrong = 0
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.rounds):
            for op in args.ops.split(","):
                for backend in ("raw-mpi", "mpi"):
                    for row in run(args, backend, op, os.path.join(directory, "out.json")):
                        for placement in ("out_of_place", "in_place"):
                            key = (op, row["size"], placement, backend)
                            samples.setdefault(key, []).append(row[placement]["busbw"])
                            wrong += max(0, row[placement]["wrong"])
    print(f"{args.ranks} ranks, float, sum; busbw in GB/s, median of {args.rounds} alternating rounds of "
          f"{args.iters} iterations; #wrong over all runs: {wrong}\n")
    print("| op | size | placement | Open MPI busbw | zero busbw | zero / Open MPI |")
    print("|---|---:|---|---:|---:|---:|")
    for (op, size, placement, backend), values in sorted(samples.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        if backend != "mpi":
            continue
        raw = statistics.median(samples[(op, size, placement, "raw-mpi")])
        mine = statistics.median(values)
        print(f"| {op} | {size // (1 << 20)} MiB | {placement.replace('_', '-')} | {raw:.2f} | {mine:.2f} | "
              f"{mine / raw:.2f}x |")


if __name__ == "__main__":
    main()
