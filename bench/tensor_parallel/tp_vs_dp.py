#!/usr/bin/env python3
"""Tensor parallelism against data parallelism on this machine: train_gpt on 2 ranks with --tp 2
(each rank holds half of every layer and runs the whole batch) and with ZeRO alone (each rank
holds the whole model and runs half the batch), the same model and global batch, in one run of
this script, so that the ratio does not carry the machine's drift between runs.

The yardstick is a prediction, not a fixed ratio: the host's shared-memory all-reduce bandwidth
varies a lot between machines. The prediction assumes both layouts do the same arithmetic per
rank (the matrix products split in half either way; the replicated work, LayerNorms and
embeddings, is small) and that ZeRO's gradient reduction overlaps backward; tensor parallelism
then adds its all-reduces, which run between layers and overlap nothing:

    predicted TP step = DP step + calls x t_allreduce(rows x embd x 4 bytes)

with calls and sizes from train_gpt's own count, and t_allreduce measured here by
zero-bench-collectives at that size on 2 ranks (in place, as the layers run it).

    tp_vs_dp.py --train-gpt PATH --bench-collectives PATH [--mpirun mpirun] [--steps 30]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def step_ms(args, tp, directory):
    report = os.path.join(directory, f"tp{tp}.json")
    run([args.mpirun, "-np", "2", "--oversubscribe", args.train_gpt, "--tp", str(tp),
         "--stage", str(args.stage), "--layers", str(args.layers), "--embd", str(args.embd),
         "--heads", str(args.heads), "--seq", str(args.seq), "--batch", str(args.batch),
         "--steps", str(args.steps), "--data", args.data, "--json", report])
    with open(report) as f:
        r = json.load(f)
    return statistics.median(r["step_seconds"][1:]) * 1e3, r


def allreduce_us(args, nbytes):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        run([args.mpirun, "-np", "2", "--oversubscribe", args.bench_collectives, "-o",
             "all_reduce", "-b", str(nbytes), "-e", str(nbytes), "-n", "50", "-w", "10",
             "--json", out])
        with open(out) as f:
            rows = json.load(f)["results"]
    return rows[0]["in_place"]["time_us"], rows[0]["in_place"]["busbw"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-gpt", required=True)
    parser.add_argument("--bench-collectives", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                       "README.md"))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--stage", type=int, default=1)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="alternating A/B rounds")
    args = parser.parse_args()
    dp, tp = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            ms, dp_report = step_ms(args, 1, tmp)
            dp.append(ms)
            ms, tp_report = step_ms(args, 2, tmp)
            tp.append(ms)
    rows = args.batch * args.seq  # TP: each rank runs the whole batch
    nbytes = rows * args.embd * 4
    t_us, busbw = allreduce_us(args, nbytes)
    calls = tp_report["tensor_allreduce_calls_per_step"]
    dp_ms, tp_ms = statistics.median(dp), statistics.median(tp)
    predicted = dp_ms + calls * t_us / 1e3
    print(f"GPT {args.layers} layers, embd {args.embd}, {args.heads} heads, seq {args.seq}, "
          f"global batch {args.batch}, stage {args.stage}, 2 ranks, median of {args.rounds} "
          f"rounds of {args.steps} steps")
    print(f"DP 2 (ZeRO alone):  {dp_ms:8.2f} ms per step")
    print(f"TP 2:               {tp_ms:8.2f} ms per step  ({tp_ms / dp_ms:.2f}x DP)")
    print(f"all-reduce of {nbytes} bytes on 2 ranks: {t_us:.1f} us ({busbw:.2f} GB/s bus "
          f"bandwidth); {calls:.0f} per TP step (the model's count)")
    print(f"predicted TP step:  {predicted:8.2f} ms  ({predicted / dp_ms:.2f}x DP); measured / "
          f"predicted = {tp_ms / predicted:.2f}")


if __name__ == "__main__":
    main()
