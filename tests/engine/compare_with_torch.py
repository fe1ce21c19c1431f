#!/usr/bin/env python3
"""Train the same MLP with zero (train_mlp under mpirun) and with PyTorch's
DistributedDataParallel + ZeroRedundancyOptimizer (gloo, same world size), from the same .npy
weights and data, and check that the losses and the final weights agree.

    compare_with_torch.py --train-mlp build/.../train_mlp --mpirun mpirun --ranks 2 --stage 3

Needs numpy and torch (Debian: python3-numpy, python3-torch). Exit status 0 when they agree.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def make_inputs(directory, widths, rows, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, widths[0])).astype(np.float32)
    # A teacher network labels the inputs (a smooth target the student can learn).
    a = x
    for i in range(len(widths) - 1):
        w = rng.uniform(-1, 1, (widths[i + 1], widths[i])).astype(np.float32) * (2 / np.sqrt(widths[i]))
        a = a @ w.T
        if i + 2 < len(widths):
            a = np.tanh(a)
    np.save(os.path.join(directory, "x.npy"), x)
    np.save(os.path.join(directory, "y.npy"), a.astype(np.float32))
    for i in range(len(widths) - 1):
        bound = 1 / np.sqrt(widths[i])
        np.save(os.path.join(directory, f"layer{i}.weight.npy"),
                rng.uniform(-bound, bound, (widths[i + 1], widths[i])).astype(np.float32))
        np.save(os.path.join(directory, f"layer{i}.bias.npy"),
                rng.uniform(-bound, bound, (widths[i + 1],)).astype(np.float32))


def torch_worker(rank, world, args, directory, result_path):
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{directory}/rendezvous", rank=rank, world_size=world)
    widths = args.widths
    layers = []
    for i in range(len(widths) - 1):
        linear = torch.nn.Linear(widths[i], widths[i + 1])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(np.load(os.path.join(directory, f"layer{i}.weight.npy"))))
            linear.bias.copy_(torch.from_numpy(np.load(os.path.join(directory, f"layer{i}.bias.npy"))))
        layers.append(linear)
        if i + 2 < len(widths):
            layers.append(torch.nn.Tanh())
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    optimizer_class = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[args.optimizer]
    extra = {"momentum": 0.9} if args.optimizer == "sgd" else {}
    optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class, lr=args.lr,
                                        weight_decay=args.weight_decay, **extra)
    x = torch.from_numpy(np.load(os.path.join(directory, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(directory, "y.npy")))
    rows = x.shape[0]
    share = args.batch // world
    losses = []
    cursor = 0
    for _ in range(args.steps):
        index = [(cursor + rank * share + i) % rows for i in range(share)]
        cursor = (cursor + args.batch) % rows
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
    if rank == 0:
        weights = {}
        for i, linear in enumerate(l for l in model.module if isinstance(l, torch.nn.Linear)):
            weights[f"layer{i}.weight"] = linear.weight.detach().numpy().tolist()
            weights[f"layer{i}.bias"] = linear.bias.detach().numpy().tolist()
        with open(result_path, "w") as f:
            json.dump({"loss": losses, "weights": weights}, f)
    dist.destroy_process_group()


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
    args = parser.parse_args()
    args.widths = [int(w) for w in args.layers.split(",")]

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as directory:
        make_inputs(directory, args.widths, args.rows, seed=7)
        out = os.path.join(directory, "zero_out")
        zero_json = os.path.join(directory, "zero.json")
        command = [args.mpirun, "-np", str(args.ranks), "--oversubscribe", args.train_mlp, "--stage", str(args.stage),
                   "--layers", args.layers, "--steps", str(args.steps), "--batch", str(args.batch),
                   "--optimizer", args.optimizer, "--lr", str(args.lr), "--weight-decay", str(args.weight_decay),
                   "--data-npy", directory, "--init-npy", directory, "--save-npy", out, "--json", zero_json]
        if args.optimizer == "sgd":
            command += ["--momentum", "0.9"]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout, run.stderr)
            sys.exit(f"train_mlp failed with status {run.returncode}")
        torch_json = os.path.join(directory, "torch.json")
        mp.spawn(torch_worker, args=(args.ranks, args, directory, torch_json), nprocs=args.ranks, join=True)

        with open(zero_json) as f:
            zero_loss = np.array(json.load(f)["loss"])
        with open(torch_json) as f:
            reference = json.load(f)
        torch_loss = np.array(reference["loss"])
        loss_error = np.max(np.abs(zero_loss - torch_loss) / np.maximum(np.abs(torch_loss), 1e-8))
        weight_error = 0.0
        for name, values in reference["weights"].items():
            mine = np.load(os.path.join(out, name + ".npy"))
            weight_error = max(weight_error, float(np.max(np.abs(mine - np.array(values, dtype=np.float32)))))
        print(f"stage {args.stage}, {args.ranks} ranks, {args.optimizer}: losses {zero_loss[0]:.6f} -> "
              f"{zero_loss[-1]:.6f} (torch {torch_loss[0]:.6f} -> {torch_loss[-1]:.6f}); "
              f"largest relative loss difference {loss_error:.2e}, largest weight difference {weight_error:.2e}")
        if not zero_loss[-1] < 0.8 * zero_loss[0]:
            sys.exit("the loss did not go down: the comparison would be meaningless")
        if loss_error > args.tolerance or weight_error > args.tolerance:
            sys.exit(f"zero and PyTorch disagree (tolerance {args.tolerance})")
        print("zero and PyTorch DDP + ZeroRedundancyOptimizer agree")


if __name__ == "__main__":
    main()
