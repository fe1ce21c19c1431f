#!/usr/bin/env python3
"""zero's MpiCommunicator against plain Open MPI, measured in one run: the backends alternate (their
order rotating from round to round), several rounds, and the median bus bandwidth of each (op,
size, in/out of place) is compared.

    compare_backends.py --bench build/release/tools/zero-bench-collectives/zero-bench-collectives
    compare_backends.py --bench ... --min 4K --max 16M --factor 4 --blocking --compare-inline

Ranks are bound to one core each when there are enough cores. --blocking waits for every call of
zero's backend before the next (the pattern of a call whose result is needed at once; Open MPI's
calls are blocking anyway); without it every iteration is in flight, as in nccl-tests. --compare-inline adds zero with ZERO_INLINE_BELOW_BYTES=0 (every call
handed to the progress thread). Prints a Markdown table (docs/collective-benchmark.md keeps the
last ones).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def run(args, backend, op, path, env_extra):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env_extra)
    # One core per rank where there are enough: unbound ranks (mpirun --oversubscribe turns Open
    # MPI's binding off) sometimes share a core for a whole run, which halves or worse every figure
    # of that run, whichever backend.
    placement = ["--bind-to", "core"] if args.ranks <= (os.cpu_count() or 1) else ["--oversubscribe"]
    command = [args.mpirun, "-np", str(args.ranks)] + placement
    for name in env_extra:
        command += ["-x", name]
    command += [args.bench, "-b", args.min, "-e", args.max, "-f", str(args.factor), "-n", str(args.iters), "-w",
                str(args.warmup), "-c", "1", "--op", op, "--backend", backend, "--json", path]
    if args.blocking and backend != "raw-mpi":
        command.append("--blocking")
    subprocess.run(command, env=env, check=True, capture_output=True)
    with open(path) as f:
        return json.load(f)["results"]


def size_text(size):
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


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
    parser.add_argument("--blocking", action="store_true")
    parser.add_argument("--compare-inline", action="store_true")
    args = parser.parse_args()

    variants = [("raw-mpi", "raw-mpi", {}), ("zero", "mpi", {})]
    if args.compare_inline:
        variants.append(("zero, no inline calls", "mpi", {"ZERO_INLINE_BELOW_BYTES": "0"}))
    samples = {}  # (op, size, placement, variant) -> [busbw]
    wrong = 0
    with tempfile.TemporaryDirectory() as directory:
        for round_index in range(args.rounds):
            for op in args.ops.split(","):
                shift = round_index % len(variants)
                for name, backend, env_extra in variants[shift:] + variants[:shift]:
                    for row in run(args, backend, op, os.path.join(directory, "out.json"), env_extra):
                        for placement in ("out_of_place", "in_place"):
                            key = (op, row["size"], placement, name)
                            samples.setdefault(key, []).append(row[placement]["busbw"])
                            wrong += max(0, row[placement]["wrong"])
    mode = "each call waited for" if args.blocking else "all iterations in flight"
    print(f"{args.ranks} ranks, float, sum, {mode}; busbw in GB/s, median of {args.rounds} alternating rounds "
          f"of {args.iters} iterations; #wrong over all runs: {wrong}\n")
    extra = [name for name, _, _ in variants[2:]]
    print("| op | size | placement | Open MPI busbw | zero busbw | zero / Open MPI |" +
          "".join(f" {name} / Open MPI |" for name in extra))
    print("|---|---:|---|---:|---:|---:|" + "---:|" * len(extra))
    keys = sorted({(op, size, placement) for (op, size, placement, _) in samples})
    for op, size, placement in keys:
        raw = statistics.median(samples[(op, size, placement, "raw-mpi")])
        mine = statistics.median(samples[(op, size, placement, "zero")])
        cells = "".join(f" {statistics.median(samples[(op, size, placement, name)]) / raw:.2f}x |" for name in extra)
        print(f"| {op} | {size_text(size)} | {placement.replace('_', '-')} | {raw:.2f} | {mine:.2f} | "
              f"{mine / raw:.2f}x |{cells}")


if __name__ == "__main__":
    main()
