#!/usr/bin/python3
"""Step time of two train_mlp builds (say, before and after a change to the engine), alternating
in each round on the same model, flags and machine, so that their ratio holds while the machine's
speed drifts:

    python3 bench/engine/before_after.py --before /tmp/old/build/examples/train_mlp/train_mlp \\
        --after build/release/examples/train_mlp/train_mlp --rounds 3

Build the "before" binary from a worktree of the older commit (git worktree add /tmp/old C; cmake
--preset release there). Each run trains --steps steps at --ranks ranks x 1 thread; its time per
step is the median after --warmup steps (slowest rank); the table gives medians over the rounds,
and for the "after" build, step() once the gradients were reduced next to the fused optimizer
pass alone on the same share, when train_mlp reports them (docs/engine-performance.md).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(binary, stage, args):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = ["mpirun", "-np", str(args.ranks), "--oversubscribe", binary, "--stage",
                   str(stage), "--layers", args.layers, "--batch", str(args.batch), "--bucket",
                   str(args.bucket), "--steps", str(args.steps), "--json", out.name]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMP_NUM_THREADS="1")
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
        with open(out.name) as f:
            report = json.load(f)
    steps = report["step_seconds"]
    rank0 = report["rank0_seconds"]
    result = {"step_ms": statistics.median(steps[args.warmup:]) * 1e3,
              "step_call_ms": rank0["step"] / len(steps) * 1e3, "loss": report["loss"][-1]}
    if "step_after_reduction" in rank0 and rank0.get("fused_kernel_per_step", 0) > 0:
        result["after_reduction_ms"] = rank0["step_after_reduction"] / len(steps) * 1e3
        result["kernel_ms"] = rank0["fused_kernel_per_step"] * 1e3
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", required=True)
    parser.add_argument("--stages", default="0,1,2,3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--layers", default="1024,2048,2048,2048,2048,2048,1024")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--bucket", type=int, default=4194304)
    parser.add_argument("--steps", type=int, default=13)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    stages = [int(s) for s in args.stages.split(",")]
    runs = {}
    for r in range(args.rounds):
        for stage in stages:
            order = [("before", args.before), ("after", args.after)]
            if r % 2:
                order.reverse()
            for name, binary in order:
                result = run(binary, stage, args)
                runs.setdefault((stage, name), []).append(result)
                print(f"round {r} stage {stage} {name}: {result['step_ms']:.1f} ms/step, step() "
                      f"{result['step_call_ms']:.1f} ms, loss {result['loss']:.6f}", flush=True)

    def median(stage, name, key):
        values = [x[key] for x in runs[stage, name] if key in x]
        return statistics.median(values) if values else float("nan")

    print(f"\n{args.ranks} ranks x 1 thread, --layers {args.layers}, batch {args.batch}, "
          f"{args.steps} steps ({args.warmup} warm-up), median of {args.rounds} rounds\n")
    print("| stage | before ms/step | after ms/step | after / before | before step() ms | after "
          "step() ms | after: step() once reduced / fused kernel |")
    print("|---|---|---|---|---|---|---|")
    for stage in stages:
        before, after = median(stage, "before", "step_ms"), median(stage, "after", "step_ms")
        ratios = [x["after_reduction_ms"] / x["kernel_ms"] for x in runs[stage, "after"]
                  if "kernel_ms" in x]
        kernel = f"{statistics.median(ratios):.2f}" if ratios else "n/a"
        print(f"| {stage} | {before:.1f} | {after:.1f} | {after / before:.2f} | "
              f"{median(stage, 'before', 'step_call_ms'):.1f} | "
              f"{median(stage, 'after', 'step_call_ms'):.1f} | {kernel} |")


if __name__ == "__main__":
    main()
