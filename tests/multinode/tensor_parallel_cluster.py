#!/usr/bin/env python3
"""Tensor parallelism on the two-node test cluster: train_gpt --tp 2 on 2 nodes x 2 ranks puts
each tensor-parallel group on one node (consecutive ranks) and ZeRO's data-parallel groups across
the link. The run must equal, bit for bit, the same run on one node (losses and final weights),
and the link must carry ZeRO's traffic but not the tensor-parallel all-reduces: per step, each
node sends about what ZeRO's collectives of its ranks move (at most 1.5 times their count) and
less than a quarter of what its ranks all-reduced within their group (the batch is chosen so
that the tensor-parallel volume is many times the data-parallel one).

    tensor_parallel_cluster.py --train-gpt PATH --mpirun PATH [--cluster tools/zero-cluster]

Exit 0 on success; 77 (skipped) where the cluster cannot be made.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

FLAGS = ["--tp", "2", "--stage", "3", "--layers", "2", "--embd", "32", "--heads", "2", "--seq",
         "32", "--batch", "64", "--deterministic", "--print-every", "1000"]


def run(command, directory):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode == 77:
        print(done.stderr, end="")
        sys.exit(77)
    if done.returncode != 0:
        sys.exit(f"tensor_parallel_cluster: {' '.join(command)} failed ({done.returncode}):\n"
                 f"{done.stdout}{done.stderr}")
    with open(os.path.join(directory, "run.json")) as f:
        return json.load(f)


def train(args, directory, steps, cluster):
    os.makedirs(directory)
    outputs = ["--steps", str(steps), "--data", args.data, "--json",
               os.path.join(directory, "run.json"), "--save-npy", os.path.join(directory, "w")]
    if cluster:
        counters = os.path.join(directory, "counters")
        command = [args.cluster, "--nodes", "2", "--ranks-per-node", "2", "--rate", "10gbit",
                   "--counters", counters, "--", args.train_gpt] + FLAGS + outputs
    else:
        command = [args.mpirun, "-np", "4", "--oversubscribe", args.train_gpt] + FLAGS + outputs
    report = run(command, directory)
    sent = []
    if cluster:
        with open(counters) as f:
            sent = [int(line.split()[1]) for line in f]
    return report, sent


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-gpt", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--cluster", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                          "tools", "zero-cluster"))
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "README.md"))
    args = parser.parse_args()
    steps, warmup = 8, 3
    with tempfile.TemporaryDirectory() as tmp:
        two_nodes, sent = train(args, os.path.join(tmp, "cluster"), steps, True)
        _, sent_warmup = train(args, os.path.join(tmp, "warmup"), warmup, True)
        one_node, _ = train(args, os.path.join(tmp, "one_node"), steps, False)
        if two_nodes["loss"] != one_node["loss"]:
            sys.exit(f"two nodes and one node trained differently:\n{two_nodes['loss']}\n"
                     f"{one_node['loss']}")
        for name in sorted(os.listdir(os.path.join(tmp, "one_node", "w"))):
            with open(os.path.join(tmp, "one_node", "w", name), "rb") as a, \
                    open(os.path.join(tmp, "cluster", "w", name), "rb") as b:
                if a.read() != b.read():
                    sys.exit(f"two nodes and one node ended with different {name}")
        # Per step, without MPI's start and the initial weights: two runs' difference.
        per_step = [(s - w) / (steps - warmup) for s, w in zip(sent, sent_warmup)]
        within_node = 2 * two_nodes["tensor_bytes_per_step"]  # the node's two ranks
        zero_traffic = 2 * two_nodes["data_bytes_per_step"]
        for node, link in enumerate(per_step):
            if link > within_node / 4 or link > 1.5 * zero_traffic:
                sys.exit(f"node {node} sent {link:.0f} bytes per step on its link: more than "
                         f"ZeRO's {zero_traffic:.0f} (x 1.5) or a quarter of the "
                         f"{within_node:.0f} its ranks all-reduced within their tensor-parallel "
                         f"group; that traffic crossed the link")
        print(f"two nodes equal one node bitwise over {steps} steps; per step each link carried "
              f"{max(per_step):.0f} bytes at most (ZeRO's collectives counted "
              f"{zero_traffic:.0f}), the tensor-parallel groups {within_node:.0f} within each "
              f"node")
    print("agree")


if __name__ == "__main__":
    main()
