#!/usr/bin/env python3
"""Plot bus bandwidth against message size from zero-bench-collectives --json files.

    zero-plot-busbw mpi.json raw-mpi.json -o busbw.png

One panel per collective, one line per input file (solid: out of place, dashed: in place).
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    if data.get("tool") != "zero-bench-collectives":
        sys.exit(f"{path}: not a zero-bench-collectives --json file")
    return data


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", help="JSON files written with --json")
    parser.add_argument("-o", "--output", default="busbw.png", help="PNG to write (default busbw.png)")
    parser.add_argument("--title", default=None)
    args = parser.parse_args()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [load(p) for p in args.inputs]
    ops = []
    for run in runs:
        for row in run["results"]:
            if row["op"] not in ops:
                ops.append(row["op"])
    fig, axes = plt.subplots(1, len(ops), figsize=(5.5 * len(ops), 4.2), squeeze=False)
    for ax, op in zip(axes[0], ops):
        for run in runs:
            rows = [r for r in run["results"] if r["op"] == op]
            if not rows:
                continue
            sizes = [r["size"] for r in rows]
            label = f'{run["backend"]} ({run["ranks"]} ranks, {run["dtype"]})'
            line, = ax.plot(sizes, [r["out_of_place"]["busbw"] for r in rows], marker="o", label=label)
            ax.plot(sizes, [r["in_place"]["busbw"] for r in rows], linestyle="--", color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(op)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
