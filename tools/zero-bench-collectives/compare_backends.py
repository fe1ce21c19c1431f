#!/usr/bin/env python3
"""zero's MpiCommunicator against plain Open MPI, measured in one run: the backends alternate launch
by launch (their order rotating from one launch round to the next), and each (op, size, in/out of
place) gets the median bus bandwidth over the launches with its spread (min-max), and the ratio
zero / Open MPI of the launches next to each other: median and worst. One lucky or unlucky launch
cannot make the figure.

    compare_backends.py --bench build/release/tools/zero-bench-collectives/zero-bench-collectives
    compare_backends.py --bench ... --launches 10 --sizes 4K,1M,16M,256M --busy 1
    compare_backends.py --bench ... --min 4K --max 16M --factor 4 --blocking --compare-inline

--busy N runs N busy loops beside the ranks for the whole measurement (a trainer's own threads
share the cores with its collectives).

Ranks are bound to one core each when there are enough cores. --blocking waits for every call of
zero's backend before the next (the pattern of a call whose result is needed at once; Open MPI's
calls are blocking anyway); without it every iteration is in flight, as in nccl-tests. --compare-inline adds zero with ZERO_INLINE_BELOW_BYTES=0 (every call
handed to the progress thread); --variant NAME:VAR=VALUE,... any other setting. Prints a Markdown table (docs/collective-benchmark.md keeps the
last ones).
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile


CORE_CHECKS = []  # every launch's machine check: the slowest rank's in-cache float sum, GB/s
ROUND_TRIPS = []  # and its round trip of a cache line between ranks, ns


def run(args, backend, op, path, env_extra):
    """The rows of one launch per size of --sizes, or of one launch over --min..--max."""
    wanted = sorted(sizes_wanted(args) or [])
    ranges = [(str(size), str(size), 2) for size in wanted] or [(args.min, args.max, args.factor)]
    rows = []
    for size_range in ranges:
        report = launch(args, backend, op, path, env_extra, size_range)
        CORE_CHECKS.append(report["core_check_gbps"]["min"])
        ROUND_TRIPS.append(report["round_trip_ns"])
        rows += [dict(row, round_trip_ns=report["round_trip_ns"]) for row in report["results"]]
    return rows


def launch(args, backend, op, path, env_extra, size_range):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env_extra)
    # One core per rank where there are enough: unbound ranks (mpirun --oversubscribe turns Open
    # MPI's binding off) sometimes share a core for a whole run, which halves or worse every figure
    # of that run, whichever backend.
    placement = ["--bind-to", "core"] if args.ranks <= (os.cpu_count() or 1) else ["--oversubscribe"]
    command = [args.mpirun, "-np", str(args.ranks)] + placement
    for name in env_extra:
        command += ["-x", name]
    smallest, largest, factor = size_range
    command += [args.bench, "-b", smallest, "-e", largest, "-f", str(factor), "-n", str(args.iters), "-w",
                str(args.warmup), "-c", "1", "--op", op, "--backend", backend, "--json", path]
    if args.blocking and backend != "raw-mpi":
        command.append("--blocking")
    subprocess.run(command, env=env, check=True, capture_output=True)
    with open(path) as f:
        return json.load(f)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def sizes_wanted(args):
    return None if not args.sizes else {parse_size(s) for s in args.sizes.split(",")}


@contextlib.contextmanager
def busy_loops(count):
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


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
    parser.add_argument("--sizes", help="comma-separated sizes (e.g. 4K,1M,16M,256M), one launch each, instead of "
                        "--min/--max/--factor")
    parser.add_argument("--launches", "--rounds", type=int, default=3, dest="launches",
                        help="launches of each backend (and op), alternating (default: %(default)s)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE,...",
                        help="one more column: zero with these ZERO_* settings (repeatable)")
    parser.add_argument("--json", help="write every launch's figures and machine check to this file")
    parser.add_argument("--busy", type=int, default=0, help="busy loops beside the ranks (default: none)")
    parser.add_argument("--blocking", action="store_true")
    parser.add_argument("--compare-inline", action="store_true")
    args = parser.parse_args()

    variants = [("raw-mpi", "raw-mpi", {}), ("zero", "mpi", {})]
    if args.compare_inline:
        variants.append(("zero, no inline calls", "mpi", {"ZERO_INLINE_BELOW_BYTES": "0"}))
    for variant in args.variant:
        name, _, settings = variant.partition(":")
        variants.append((name, "mpi", dict(kv.split("=", 1) for kv in settings.split(",") if kv)))
    samples = {}  # (op, size, placement, variant) -> [busbw], one per launch round
    launches = []  # every measurement with its launch's machine check, for --json
    wrong = 0
    with tempfile.TemporaryDirectory() as directory, busy_loops(args.busy):
        for round_index in range(args.launches):
            print(f"launch round {round_index + 1}/{args.launches}", file=sys.stderr)
            for op in args.ops.split(","):
                shift = round_index % len(variants)
                for name, backend, env_extra in variants[shift:] + variants[:shift]:
                    for row in run(args, backend, op, os.path.join(directory, "out.json"), env_extra):
                        for placement in ("out_of_place", "in_place"):
                            key = (op, row["size"], placement, name)
                            samples.setdefault(key, []).append(row[placement]["busbw"])
                            launches.append({"round": round_index, "op": op, "size": row["size"],
                                              "placement": placement, "variant": name,
                                              "busbw": row[placement]["busbw"],
                                              "round_trip_ns": row["round_trip_ns"]})
                            wrong += max(0, row[placement]["wrong"])
    mode = "each call waited for" if args.blocking else "all iterations in flight"
    busy = f", {args.busy} busy loop{'s' if args.busy > 1 else ''} beside the ranks" if args.busy else ", quiet"
    print(f"{args.ranks} ranks, float, sum, {mode}{busy}; busbw in GB/s: median (min-max) of {args.launches} "
          f"launches of {args.iters} iterations, the backends alternating; #wrong over all runs: {wrong}\n")
    extra = [name for name, _, _ in variants[2:]]
    print("| op | size | placement | Open MPI busbw | zero busbw | zero max/min | zero / Open MPI: median (worst) |" +
          "".join(f" {name} / Open MPI |" for name in extra))
    print("|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(extra))

    def spread(values):
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    keys = sorted({(op, size, placement) for (op, size, placement, _) in samples})
    worst_ratio, worst_spread = float("inf"), 0.0
    for op, size, placement in keys:
        raw = samples[(op, size, placement, "raw-mpi")]
        mine = samples[(op, size, placement, "zero")]
        ratios = [m / r for m, r in zip(mine, raw)]  # launches of the same round, next to each other
        worst_ratio = min(worst_ratio, statistics.median(ratios))
        worst_spread = max(worst_spread, max(mine) / min(mine))
        cells = "".join(f" {statistics.median(samples[(op, size, placement, name)]) / statistics.median(raw):.2f}x |"
                        for name in extra)
        print(f"| {op} | {size_text(size)} | {placement.replace('_', '-')} | {spread(raw)} | {spread(mine)} | "
              f"{max(mine) / min(mine):.2f} | {statistics.median(ratios):.2f}x ({min(ratios):.2f}x) |{cells}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "launches": launches}, f, indent=1)
    print(f"\nLowest median ratio: {worst_ratio:.2f}x; widest spread of zero: {worst_spread:.2f} (max/min). "
          f"Machine check of the launches: in-cache float sum (slowest rank) {spread(CORE_CHECKS)} GB/s; round "
          f"trip of a cache line between ranks {spread(ROUND_TRIPS)} ns, under 200 ns in "
          f"{sum(t < 200 for t in ROUND_TRIPS)} of {len(ROUND_TRIPS)} launches.")


if __name__ == "__main__":
    main()
