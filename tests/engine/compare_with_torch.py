#!/usr/bin/env python3
"""Train the same MLP with zero (train_mlp under mpirun) and with PyTorch's
DistributedDataParallel + ZeroRedundancyOptimizer (gloo, same world size), from the same .npy
weights and data, and check that the losses and the final weights agree.

    compare_with_torch.py --train-mlp build/.../train_mlp --mpirun mpirun --ranks 2 --stage 3

Needs numpy and torch (Debian: python3-numpy, python3-torch). Exit status 0 when they agree.
The model, the data and both launches live in torch_reference.py, next to this file.
"""
import argparse
import os
import sys
import tempfile

import torch_reference as reference


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mlp", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--stage", type=int, default=3)
    parser.add_argument("--layers", default="12,40,33,6")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--rows", type=int, default=96)
    parser.add_argument("--optimizer", default="adam", choices=["adam", "adamw", "sgd"])
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--tolerance", type=float, default=2e-4)
    parser.add_argument("--expect-transport", help="fail unless train_mlp reports this transport")
    args = parser.parse_args()
    widths = reference.parse_widths(args.layers)

    with tempfile.TemporaryDirectory() as directory:
        reference.make_inputs(directory, widths, args.rows, seed=7)
        out = os.path.join(directory, "zero_out")
        flags = {"--stage": args.stage, "--layers": args.layers, "--steps": args.steps, "--batch": args.batch,
                 "--optimizer": args.optimizer, "--lr": args.lr, "--weight-decay": args.weight_decay,
                 "--data-npy": directory, "--init-npy": directory, "--save-npy": out}
        if args.optimizer == "sgd":
            flags["--momentum"] = 0.9
        try:
            zero = reference.run_train_mlp(args.train_mlp, args.mpirun, args.ranks, flags)
        except RuntimeError as error:
            sys.exit(str(error))
        if args.expect_transport and zero.get("transport") != args.expect_transport:
            sys.exit(f"train_mlp ran on the {zero.get('transport')} transport, not {args.expect_transport}")
        spec = {"widths": widths, "batch": args.batch, "steps": args.steps, "lr": args.lr,
                "weight_decay": args.weight_decay, "optimizer": args.optimizer, "momentum": 0.9,
                "wrapping": "ddp_zero", "threads": 1, "weights": True}
        torch_run = reference.train_torch(spec, args.ranks, directory)
        zero_weights = reference.load_weights(out, len(widths) - 1)

    zero_loss, torch_loss = zero["loss"], torch_run["loss"]
    loss_error = reference.relative_difference(zero_loss, torch_loss)
    weight_error = max(float(abs(zero_weights[name] - value).max()) for name, value in torch_run["weights"].items())
    print(f"stage {args.stage}, {args.ranks} ranks ({zero['transport']} transport, {zero['nodes']} nodes), "
          f"{args.optimizer}: losses {zero_loss[0]:.6f} -> "
          f"{zero_loss[-1]:.6f} (torch {torch_loss[0]:.6f} -> {torch_loss[-1]:.6f}); "
          f"largest relative loss difference {loss_error:.2e}, largest weight difference {weight_error:.2e}")
    if not zero_loss[-1] < 0.8 * zero_loss[0]:
        sys.exit("the loss did not go down: the comparison would be meaningless")
    if loss_error > args.tolerance or weight_error > args.tolerance:
        sys.exit(f"zero and PyTorch disagree (tolerance {args.tolerance})")
    print("zero and PyTorch DDP + ZeroRedundancyOptimizer agree")


if __name__ == "__main__":
    main()
