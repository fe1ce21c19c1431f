#!/usr/bin/env python3
"""Train the MLP with ZeRO-3 twice, with full-precision weight gathers and with int8 ones (ZeRO++'s
qwZ, train_mlp --quantized-weights), from the same seed, and check what qwZ promises: the loss
curve stays within a relative tolerance of the unquantized one at every logged step, training still
converges, and the all-gathers move at most 0.3 of the bytes.

    quantized_run.py --train-mlp build/.../train_mlp --mpirun mpirun --ranks 3

Exit status 0 (and a last line "agree") when they do.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(args, directory, name, extra):
    out = os.path.join(directory, name + ".json")
    command = [args.mpirun, "-np", str(args.ranks), "--oversubscribe", args.train_mlp,
               "--stage", "3", "--steps", str(args.steps), "--batch", str(24 * args.ranks),
               "--layers", "32,256,256,8", "--json", out] + extra
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    with open(out) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mlp", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--tolerance", type=float, default=0.02, help="relative, on the loss")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        exact = run(args, directory, "exact", [])
        quantized = run(args, directory, "quantized",
                        ["--quantized-weights", "--quantization-block", str(args.block)])
    worst = 0.0
    for step, (a, b) in enumerate(zip(exact["loss"], quantized["loss"])):
        difference = abs(a - b) / abs(a)
        worst = max(worst, difference)
        if difference > args.tolerance:
            sys.exit(f"step {step + 1}: loss {b} with int8 weight gathers, {a} without: "
                     f"{difference:.2%} apart, more than {args.tolerance:.0%}")
    first, last = quantized["loss"][0], quantized["loss"][-1]
    if not last < 0.5 * first:
        sys.exit(f"with int8 weight gathers the loss went from {first} to {last}: no convergence")
    gathered = [step["all_gather"] for step in (exact["communication_per_step"][-1],
                                                quantized["communication_per_step"][-1])]
    total = [step["bytes"] for step in (exact["communication_per_step"][-1],
                                        quantized["communication_per_step"][-1])]
    # fp32 weights: 4 bytes per gathered element; int8: one byte each (the elements are bytes).
    ratio = gathered[1] / (4 * gathered[0])
    if not ratio < 0.3:
        sys.exit(f"int8 weight gathers moved {ratio:.3f} of the full-precision bytes")
    print(f"{args.steps} steps on {args.ranks} ranks: loss {exact['loss'][-1]:.6f} exact, "
          f"{quantized['loss'][-1]:.6f} with int8 weight gathers (blocks of {args.block}); "
          f"worst step {worst:.3%} apart; all-gather bytes x{ratio:.3f}, "
          f"all bytes per step x{total[1] / total[0]:.3f}")
    print("agree")


if __name__ == "__main__":
    main()
