#!/usr/bin/env python3
"""What ZeRO++ promises across nodes, on the two-node test cluster: with int8 weight gathers (qwZ),
backward's gathers within the node (hpZ) and 4-bit gradient reduce-scatters (qgZ), the bytes a
node's link carries per stage-3 step drop from the paper's 3M to about 0.75M (fp16, M the model's
bytes: a quarter), counted by the link's own interface counters; and training still converges to
within a stated tolerance of the plain run's loss.

    zeropp_link_bytes.py --train-mlp PATH [--cluster tools/zero-cluster]

Per variant, two runs (STEPS and WARMUP steps) on tools/zero-cluster; their counters' difference
over STEPS - WARMUP steps is the per-step traffic, without MPI's startup and the initial weights.
Exit 0 when the ratio lies in [--at-least, --at-most] and the final losses agree within
--loss-tolerance; 77 (skipped) where the cluster cannot be made.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def link_bytes(args, flags, steps, directory):
    counters = os.path.join(directory, "counters")
    report = os.path.join(directory, "run.json")
    command = [args.cluster, "--nodes", "2", "--ranks-per-node", "2", "--rate", "10gbit", "--counters",
               counters, "--", args.train_mlp, "--stage", "3", "--dtype", "fp16", "--steps", str(steps),
               "--print-every", "1000", "--no-reference-pass", "--json", report] + flags
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode == 77:
        print(done.stderr, end="")
        sys.exit(77)
    if done.returncode != 0:
        sys.exit(f"zeropp_link_bytes: {' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    total = 0
    with open(counters) as f:
        for line in f:
            _, sent, received = line.split()
            total += int(sent) + int(received)
    with open(report) as f:
        return total, json.load(f)["loss"][-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mlp", required=True)
    parser.add_argument("--cluster", default=os.path.join(os.path.dirname(__file__), "../../tools/zero-cluster"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--at-most", type=float, default=0.28)
    parser.add_argument("--at-least", type=float, default=0.22)
    parser.add_argument("--loss-tolerance", type=float, default=0.02)
    args = parser.parse_args()
    variants = {"plain stage 3": [],
                "ZeRO++ (qwZ + hpZ + qgZ)": ["--quantized-weights", "--hpz", "2", "--quantized-gradients"]}
    per_step, loss = {}, {}
    with tempfile.TemporaryDirectory() as directory:
        for name, flags in variants.items():
            short, _ = link_bytes(args, flags, args.warmup, directory)
            full, loss[name] = link_bytes(args, flags, args.steps, directory)
            per_step[name] = (full - short) / (args.steps - args.warmup)
            print(f"{name}: {per_step[name] / 1e6:.3f} MB per step on the links, final loss {loss[name]:.6f}")
    plain, zeropp = per_step.values()
    ratio = zeropp / plain
    drift = abs(loss["ZeRO++ (qwZ + hpZ + qgZ)"] - loss["plain stage 3"]) / loss["plain stage 3"]
    print(f"ZeRO++ / plain: {ratio:.3f} of the link bytes per step (paper: 0.75M / 3M = 0.25); "
          f"final loss off by {drift:.4f} (relative)")
    ok = args.at_least <= ratio <= args.at_most and drift <= args.loss_tolerance
    if not ok:
        sys.exit(f"zeropp_link_bytes: expected a ratio in [{args.at_least}, {args.at_most}] and a loss within "
                 f"{args.loss_tolerance}")


if __name__ == "__main__":
    main()
