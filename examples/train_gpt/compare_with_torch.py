#!/usr/bin/env python3
"""train_gpt against PyTorch: the same model (reference.py), initial weights and token batches
must give the same losses, within --rtol relative, step by step, and the same weights after the
last step, each tensor within --weight-rtol of torch's in relative L2 norm, at any rank count and
stage. With --checkpoints K, train_gpt also runs with K kept block inputs, and that run must equal
the one without bit for bit: losses and final weights. With --tp T, train_gpt splits every layer
over groups of T ranks (tensor parallelism) and ZeRO works over the rest; the run must also keep
the replicated parameters bitwise alike across each group and count the all-reduces the model's
shapes predict. With --same-bits-at-stages, train_gpt runs again at those stages and must give
the same bits. Prints "agree" on success.

The bounds stand on what was measured (docs/activation-checkpointing.md): losses agree within
about 1e-7 and weights within about 1e-6 over 20 steps; the defaults leave a margin of 10 for other
compilers and BLAS builds, and are far below what a wrong gradient, a skipped or doubled update,
or a missed weight decay gives (1e-3 and more). One slice is compared apart: the attention's key
bias, whose true gradient is zero (see below)."""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def run_train_gpt(args, out, init, extra):
    os.makedirs(out)
    command = [args.mpirun, "-np", str(args.ranks), "--oversubscribe", args.train_gpt,
               "--stage", str(args.stage), "--tp", str(args.tp), "--layers", str(args.layers), "--heads", str(args.heads),
               "--embd", str(args.embd), "--seq", str(args.seq), "--batch", str(args.batch),
               "--steps", str(args.steps), "--optimizer", args.optimizer,
               "--lr", repr(args.lr * args.wrong_lr_factor),
               "--weight-decay", str(args.weight_decay), "--data", args.data, "--init-npy", init,
               "--deterministic", "--json", os.path.join(out, "run.json"),
               "--save-npy", os.path.join(out, "weights")] + extra
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"train_gpt failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    with open(os.path.join(out, "run.json")) as f:
        return json.load(f)


def require_same_bits(tmp, a_dir, b_dir, a, b, what):
    if a["loss"] != b["loss"]:
        sys.exit(f"{what} changed the losses:\n{a['loss']}\n{b['loss']}")
    for name in sorted(os.listdir(os.path.join(tmp, a_dir, "weights"))):
        x = np.load(os.path.join(tmp, a_dir, "weights", name))
        y = np.load(os.path.join(tmp, b_dir, "weights", name))
        if x.tobytes() != y.tobytes():
            sys.exit(f"{what} changed the final {name}")


def tensor_traffic(args, recomputed):
    """The model's all-reduces over the tensor-parallel group per step, from its shapes (not from
    train_gpt's own formula): per block 2 in forward and 2 in backward of rows x embd, 2 more per
    recomputed block, the embedding's and the head's input gradient (rows x embd each) and the
    cross-entropy's three of rows; rows = the tokens of one replica's share of the batch."""
    rows = args.batch // (args.ranks // args.tp) * args.seq
    wide = 4 * args.layers + 2 * recomputed + 2
    return wide + 3, wide * rows * args.embd + 3 * rows


def check_tensor_parallel(args, run):
    if not run["replicated_identical"]:
        sys.exit("the replicated parameters differ between the ranks of a tensor-parallel group")
    calls, elements = tensor_traffic(args, run["recomputed_layers"])
    if (run["tensor_allreduce_calls_per_step"], run["tensor_allreduce_elements_per_step"]) != \
            (calls, elements):
        sys.exit(f"tensor-parallel all-reduces per step: {run['tensor_allreduce_calls_per_step']}"
                 f" calls of {run['tensor_allreduce_elements_per_step']} elements, the model's "
                 f"shapes give {calls} of {elements}")
    print(f"tensor parallel {args.tp}: replicated parameters bitwise alike; {calls} all-reduces "
          f"of {elements} elements per step, as the shapes predict")


def check_partitioned_activations(args, tmp, plain):
    """Pa at every stage asked for gives the plain run's bits; each rank keeps its 1/T slice of
    each kept input (ceil(n / T) floats), and with the NVMe tier none in memory."""
    kept = min(args.checkpoints, args.layers) - 1
    whole = args.batch // (args.ranks // args.tp) * args.seq * args.embd
    sliced = -(-whole // args.tp)
    stages = [args.stage] + [int(s) for s in args.same_bits_at_stages.split(",") if s]
    extra = ["--checkpoint-activations", str(args.checkpoints), "--partition-activations"]
    saved_stage = args.stage
    for stage in stages:
        args.stage = stage
        run = run_train_gpt(args, os.path.join(tmp, f"pa{stage}"), init_dir(tmp), extra)
        require_same_bits(tmp, "plain", f"pa{stage}", plain, run,
                          f"partitioned activations at stage {stage}")
        check_tensor_parallel(args, run)
        if run["kept_input_bytes"] != kept * sliced * 4:
            sys.exit(f"partitioned activations at stage {stage}: {run['kept_input_bytes']} bytes "
                     f"of kept inputs on rank 0, expected {kept} slices of {sliced} floats")
        # Each kept input whole (padded), and beside it every rank's 64-bit hash (2 floats each).
        if run["activation_gathered_elements_per_step"] != kept * (sliced + 2) * args.tp:
            sys.exit(f"partitioned activations: {run['activation_gathered_elements_per_step']} "
                     f"elements gathered per step, expected {kept} inputs of "
                     f"{sliced * args.tp} (padded) and their {args.tp} hashes")
    args.stage = saved_stage
    print(f"partitioned activations at stages {','.join(map(str, stages))}: bitwise equal; kept "
          f"inputs on rank 0 {kept * sliced * 4} bytes against {kept * whole * 4} whole "
          f"(1/{args.tp}, {kept} slices of {sliced} floats)")
    if args.kept_inputs_nvme:
        run = run_train_gpt(args, os.path.join(tmp, "pa_nvme"), init_dir(tmp),
                            extra + ["--kept-inputs-nvme", args.kept_inputs_nvme])
        require_same_bits(tmp, "plain", "pa_nvme", plain, run,
                          "partitioned activations on the NVMe tier")
        # The tier writes whole blocks of 4 KiB (O_DIRECT): each slice rounded up to them.
        written, slice_bytes = run["nvme_bytes_written"], sliced * 4
        per_slice = -(-slice_bytes // 4096) * 4096
        if run["kept_input_bytes"] != 0 or written != args.steps * kept * per_slice:
            sys.exit(f"partitioned activations on the NVMe tier: {run['kept_input_bytes']} bytes "
                     f"in memory, {written} written, expected 0 and {args.steps} steps x {kept} "
                     f"slices of {slice_bytes} bytes in blocks of 4 KiB")
        print(f"partitioned activations on the NVMe tier: bitwise equal, none in memory, "
              f"{written} bytes written by rank 0 ({args.steps} steps x {kept} slices of "
              f"{slice_bytes} bytes, in blocks of 4 KiB)")


def init_dir(tmp):
    return os.path.join(tmp, "init")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-gpt", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--stage", type=int, default=0)
    parser.add_argument("--checkpoints", type=int, default=0)
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel group size")
    parser.add_argument("--same-bits-at-stages", default="", metavar="S,S,...",
                        help="run again at these stages: the same losses and weights, bitwise")
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--embd", type=int, default=32)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--batch", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--data", required=True)
    parser.add_argument("--rtol", type=float, default=1e-6, help="losses, relative")
    parser.add_argument("--weight-rtol", type=float, default=1e-5,
                        help="final weights, relative L2 norm of the difference, per tensor")
    parser.add_argument("--wrong-lr-factor", type=float, default=1.0, metavar="F",
                        help="run train_gpt at F times torch's learning rate, to see the "
                             "comparison fail (a self-test of its bounds)")
    parser.add_argument("--kept-inputs-nvme", metavar="DIR",
                        help="the checkpointed run keeps its block inputs on the NVMe tier in DIR")
    parser.add_argument("--partition-activations", action="store_true",
                        help="with --tp and --checkpoints: train_gpt with partitioned activations "
                             "(ZeRO-R's Pa) at --stage and every --same-bits-at-stages stage "
                             "(with --kept-inputs-nvme, once more with the slices there) must give "
                             "the plain run's bits, keeping 1/T of each kept input")
    args = parser.parse_args()
    if args.partition_activations and (args.tp < 2 or args.checkpoints < 1):
        parser.error("--partition-activations needs --tp > 1 and --checkpoints > 0")

    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        reference.init_npy(init, args.layers, args.heads, args.embd, args.seq, seed=3)
        plain = run_train_gpt(args, os.path.join(tmp, "plain"), init, [])

        reference.torch.manual_seed(0)
        model = reference.GPT(args.layers, args.heads, args.embd, args.seq)
        reference.load_npy(model, init)
        with open(args.data, "rb") as f:
            data = f.read()
        expected = reference.train(model, data, args.steps, args.batch, args.optimizer, args.lr,
                                   args.weight_decay)
        worst = 0.0
        for step, (got, want) in enumerate(zip(plain["loss"], expected)):
            error = abs(got - want) / abs(want)
            worst = max(worst, error)
            if error > args.rtol:
                sys.exit(f"step {step}: train_gpt loss {got:.8f}, torch {want:.8f} "
                         f"(relative error {error:.2e} > {args.rtol})")
        if len(plain["loss"]) != args.steps:
            sys.exit(f"train_gpt reported {len(plain['loss'])} losses, expected {args.steps}")
        if plain["loss"][-1] >= plain["loss"][0]:
            sys.exit(f"the loss did not fall: {plain['loss'][0]} -> {plain['loss'][-1]}")
        worst_weight, worst_name = 0.0, None
        for name, tensor in reference.saved_parameters(model).items():
            want = tensor.detach().numpy().astype(np.float64)
            got = np.load(os.path.join(tmp, "plain", "weights", name + ".npy")).astype(np.float64)
            if got.shape != want.shape:
                sys.exit(f"final {name}: train_gpt saved shape {got.shape}, torch has {want.shape}")
            if name.endswith("attn.c_attn.bias"):
                # The key bias (the middle third) has a true gradient of exactly zero: adding a
                # constant to every key leaves the softmax unchanged. Both sides' gradients there
                # are rounding noise, which Adam normalises into steps of up to lr each, so the two
                # runs part at the scale of lr * steps, not of rounding. Compared apart, by that.
                embd = got.shape[0] // 3
                key = slice(embd, 2 * embd)
                apart = float(np.max(np.abs(got[key] - want[key])))
                if apart > 2 * args.lr * args.steps:
                    sys.exit(f"final {name}, key part: {apart:.2e} from torch's, more than Adam's "
                             f"steps can reach from noise (2 lr steps = {2 * args.lr * args.steps})")
                got, want = np.delete(got, key), np.delete(want, key)
            error = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
            if error >= worst_weight:
                worst_weight, worst_name = error, name
        if worst_weight > args.weight_rtol:
            sys.exit(f"final {worst_name}: relative L2 error {worst_weight:.2e} against torch's "
                     f"> {args.weight_rtol}")
        if args.tp > 1:
            check_tensor_parallel(args, plain)
        print(f"losses within {worst:.2e} of torch's over {args.steps} steps "
              f"({plain['loss'][0]:.4f} -> {plain['loss'][-1]:.4f}); final weights within "
              f"{worst_weight:.2e} (worst: {worst_name})")

        for stage in [int(s) for s in args.same_bits_at_stages.split(",") if s]:
            saved_stage, args.stage = args.stage, stage
            other = run_train_gpt(args, os.path.join(tmp, f"stage{stage}"), init, [])
            args.stage = saved_stage
            require_same_bits(tmp, "plain", f"stage{stage}", plain, other, f"stage {stage}")
        if args.same_bits_at_stages:
            print(f"stages {args.same_bits_at_stages} against stage {args.stage}: bitwise equal")

        if args.checkpoints:
            extra = ["--checkpoint-activations", str(args.checkpoints)]
            if args.kept_inputs_nvme:
                extra += ["--kept-inputs-nvme", args.kept_inputs_nvme]
            checkpointed = run_train_gpt(args, os.path.join(tmp, "checkpointed"), init, extra)
            if args.kept_inputs_nvme and checkpointed["nvme_bytes_written"] == 0:
                sys.exit("no kept input went to the NVMe tier")
            if checkpointed["recomputed_layers"] == 0:
                sys.exit("the checkpointed run recomputed nothing")
            require_same_bits(tmp, "plain", "checkpointed", plain, checkpointed, "checkpointing")
            if args.tp > 1:
                check_tensor_parallel(args, checkpointed)
            print(f"{args.checkpoints} checkpoints: bitwise equal, "
                  f"{checkpointed['recomputed_layers']} blocks recomputed per step, activation "
                  f"peak {checkpointed['peak_activation_bytes']} bytes against "
                  f"{plain['peak_activation_bytes']}")
        if args.partition_activations:
            check_partitioned_activations(args, tmp, plain)
    print("agree")


if __name__ == "__main__":
    main()
