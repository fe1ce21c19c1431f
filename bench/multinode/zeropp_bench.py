#!/usr/bin/env python3
"""ZeRO++ against plain stage 3 on the two-node test cluster (tools/zero-cluster), measured in one
run: the same MLP, data, dtype and ranks, alternating the variants for several rounds, at each
link rate asked for. Per variant it reports the median step time, the bytes each node's link
carried per step (the cluster's interface counters, startup excluded), and the final loss:

    plain        --stage 3
    qwZ          --stage 3 --quantized-weights                      (int8 weight gathers)
    qwZ+hpZ      ... --hpz K                                        (backward gathers in the node)
    ZeRO++       ... --quantized-gradients                          (4-bit gradient reduce-scatter)

    zeropp_bench.py --train-mlp build/release/examples/train_mlp/train_mlp [--rates 1gbit,10gbit]

Bytes per step: a run of --steps S and one of --warmup-steps W, the difference of their counters
over S - W steps, so that MPI's startup and the initial weights do not count. Step time: the median
of the S-step run's steps after the first W (each timed on the slowest rank). Needs root (network
namespaces). Prints a Markdown table (docs/multinode.md keeps the last one).
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

VARIANTS = [
    ("plain", []),
    ("qwZ", ["--quantized-weights"]),
    ("qwZ+hpZ", ["--quantized-weights", "--hpz", "{ranks_per_node}"]),
    ("ZeRO++", ["--quantized-weights", "--hpz", "{ranks_per_node}", "--quantized-gradients"]),
]


def run(args, rate, flags, steps, directory):
    counters = os.path.join(directory, "counters")
    result = os.path.join(directory, "run.json")
    command = [args.cluster, "--nodes", str(args.nodes), "--ranks-per-node", str(args.ranks_per_node),
               "--rate", rate, "--counters", counters, "--", args.train_mlp, "--stage", "3",
               "--steps", str(steps), "--layers", args.layers, "--batch", str(args.batch), "--dtype", args.dtype,
               "--bucket", str(args.bucket), "--print-every", "1000", "--no-reference-pass", "--json", result]
    command += [f.format(ranks_per_node=args.ranks_per_node) for f in flags]
    subprocess.run(command, check=True, capture_output=True, text=True)
    link = 0
    with open(counters) as f:
        for line in f:
            _, sent, received = line.split()
            link += int(sent) + int(received)
    with open(result) as f:
        report = json.load(f)
    return link / args.nodes, report  # per node: sent + received


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mlp", required=True)
    parser.add_argument("--cluster", default=os.path.join(os.path.dirname(__file__), "../../tools/zero-cluster"))
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--ranks-per-node", type=int, default=2)
    parser.add_argument("--layers", default="256,1024,1024,1024,1024,256")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--bucket", type=int, default=1 << 20)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for rate in args.rates.split(","):
            times = {name: [] for name, _ in VARIANTS}
            per_step = {name: [] for name, _ in VARIANTS}
            losses = {}
            for _ in range(args.rounds):
                for name, flags in VARIANTS:
                    short, _ = run(args, rate, flags, args.warmup_steps, directory)
                    full, report = run(args, rate, flags, args.steps, directory)
                    per_step[name].append((full - short) / (args.steps - args.warmup_steps))
                    times[name].append(statistics.median(report["step_seconds"][args.warmup_steps:]))
                    losses[name] = report["loss"][-1]
            plain_time = statistics.median(times["plain"])
            plain_bytes = statistics.median(per_step["plain"])
            for name, _ in VARIANTS:
                t = statistics.median(times[name])
                b = statistics.median(per_step[name])
                spread = f"{min(times[name]) * 1e3:.1f}-{max(times[name]) * 1e3:.1f}"
                rows.append((rate, name, t * 1e3, spread, plain_time / t, b / 1e6, b / plain_bytes, losses[name]))
            psi = report["psi"]
    print(f"{args.nodes} nodes x {args.ranks_per_node} ranks, MLP {args.layers} ({psi / 1e6:.2f}M parameters), "
          f"{args.dtype}, batch {args.batch}; medians of {args.rounds} alternating rounds; link bytes per node "
          f"(sent + received) per step, steps {args.warmup_steps + 1}-{args.steps}\n")
    print("| link | variant | step (ms) | rounds' range | speed-up | link MB / step | link bytes vs plain | final loss |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for rate, name, ms, spread, speedup, mb, ratio, loss in rows:
        print(f"| {rate} | {name} | {ms:.1f} | {spread} | {speedup:.2f}x | {mb:.2f} | {ratio:.3f} | {loss:.6f} |")


if __name__ == "__main__":
    main()
