#!/usr/bin/env python3
"""Checks train_torch (zero::torch) against itself and against PyTorch.

1. At 1, 2 and 3 ranks, stages 0-3 give the same loss at every step, bit for bit (Adam).
2. Those losses match plain libtorch's (one process, the whole batch, torch::optim::Adam): bit for
   bit at 1 rank (checked so), within LOSS_BOUND (relative) at 2 and 3 ranks, where each rank's
   loss and gradient are means over its share, averaged over the ranks: the same sums in another
   order.
3. With SGD (stages 0 and 3 at 1, 2 and 3 ranks), the final weights, read from the state_dict file,
   match plain libtorch's torch::optim::SGD: bit for bit at 1 rank, within WEIGHT_BOUND (relative
   L2 norm of the difference, per tensor) at 2 and 3. Adam divides each gradient by its own root
   mean square, so a gradient off by a constant factor (a sum over the ranks instead of their
   average, say) changes Adam's steps only through eps; SGD's steps are the gradient times lr.
4. libtorch's own data parallel run (--trainer ddp, c10d's Gloo) at 2 ranks gives plain libtorch's
   losses within LOSS_BOUND.
5. The state_dict file zero writes loads into examples/common/torch_gpt.py's GPT with
   load_state_dict(strict=True), whose loss on the next batch is the one train_torch computed with
   its final weights.
Every run must report STEPS losses.

The bounds have teeth: --wrong-lr-factor runs zero at lr times the factor (plain libtorch keeps
lr), and --quick runs only the comparisons of 2 and 3 at 2 ranks; CTest runs both with a factor
whose gap is over 10 times the normal one, and expects both comparisons to fail.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "train_gpt"))
from torch_gpt import GPT  # noqa: E402
import reference  # noqa: E402  (train_gpt's data rule, which train_torch shares)

# Measured over 6 steps at 2 and 3 ranks: losses within 1.5e-7 of plain libtorch's (Adam), final
# weights within 1.6e-7 (SGD). The bounds leave a margin of 6-7 over those. What they catch: a
# learning rate off by 1e-5 (losses 3.7e-6 apart, weights 1.2e-5: check.py --quick
# --wrong-lr-factor 1.00001, which CTest runs), and a gradient off by a factor of 2, as a sum over
# 2 ranks instead of their average would be (losses 1.6e-6 apart, weights 1.15).
LOSS_BOUND = 1e-6
WEIGHT_BOUND = 1e-6
STEPS = 6
CONFIG = dict(layers=2, heads=4, embd=64, seq=32)
BATCH = 12
ADAM_LR = 3e-3
SGD_LR = 0.1


def load_safetensors(path):
    """The file as a state_dict: with the safetensors package where installed, else read here."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]),
                                     dtype=torch.float32).view(entry["shape"])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-torch", required=True)
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--wrong-lr-factor", type=float, default=1.0, metavar="F",
                        help="run zero at F times plain libtorch's learning rate, to see the "
                             "comparisons fail (a self-test of their bounds)")
    parser.add_argument("--quick", action="store_true",
                        help="only zero at 2 ranks, stage 0, against plain libtorch: the losses "
                             "with Adam and the final weights with SGD")
    args = parser.parse_args()
    data_file = os.path.join(HERE, "..", "..", "README.md")
    failures = []
    work = tempfile.mkdtemp(prefix="zero-train-torch-")
    state_files = []

    def run(np, optimizer, *flags, trainer="zero", state_dict=False):
        out = os.path.join(work, "run.json")
        lr = ADAM_LR if optimizer == "adam" else SGD_LR
        if trainer == "zero":
            lr *= args.wrong_lr_factor
        command = [args.mpiexec, "-np", str(np), "--oversubscribe", args.train_torch,
                   "--trainer", trainer, "--optimizer", optimizer, "--lr", repr(lr),
                   "--steps", str(STEPS), "--batch", str(BATCH), "--data", data_file,
                   "--json", out, *flags]
        if state_dict:
            state_files.append(os.path.join(work, f"state{len(state_files)}.safetensors"))
            command += ["--save-state-dict", state_files[-1]]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            sys.exit(f"check.py: {' '.join(command)} failed ({done.returncode}):\n"
                     f"{done.stdout}{done.stderr}")
        with open(out) as f:
            result = json.load(f)
        os.remove(out)
        if len(result["loss"]) != STEPS:
            failures.append(f"{' '.join(command)}: {len(result['loss'])} losses, not {STEPS}")
        if state_dict:
            result["weights"] = load_safetensors(state_files[-1])
        return result

    plain = run(1, "adam", trainer="plain")
    print(f"plain libtorch, 1 rank: final loss {plain['final_loss']:.9g}")
    plain_sgd = run(1, "sgd", trainer="plain", state_dict=True)

    def against_plain(what, losses, bitwise):
        if bitwise:
            same = losses == plain["loss"]
            print(f"  {what}: losses {'equal to' if same else 'NOT equal to'} plain libtorch's, "
                  f"bit for bit")
            if not same:
                failures.append(f"{what}: losses {losses} are not plain libtorch's "
                                f"{plain['loss']} bit for bit")
            return
        worst = max((abs(a - b) / abs(b) for a, b in zip(losses, plain["loss"])),
                    default=float("inf"))
        print(f"  {what}: largest relative difference from plain libtorch's losses {worst:.2e}")
        if not worst <= LOSS_BOUND:
            failures.append(f"{what}: losses {worst:.2e} from plain libtorch's "
                            f"(bound {LOSS_BOUND})")

    def weights_against_plain(what, weights, bitwise):
        expected = plain_sgd["weights"]
        if sorted(weights) != sorted(expected):
            failures.append(f"{what}: state_dict keys {sorted(weights)} are not plain libtorch's "
                            f"{sorted(expected)}")
            return
        if bitwise:
            differ = [name for name in expected if not torch.equal(weights[name], expected[name])]
            print(f"  {what}: final weights {'NOT ' if differ else ''}equal to plain libtorch's "
                  f"(SGD), bit for bit")
            if differ:
                failures.append(f"{what}: final weights of {differ} are not plain libtorch's "
                                f"bit for bit")
            return
        worst, worst_name = 0.0, None
        for name, want in expected.items():
            want = want.double()
            error = ((weights[name].double() - want).norm() / want.norm().clamp_min(1e-30)).item()
            if error >= worst:
                worst, worst_name = error, name
        print(f"  {what}: final weights within {worst:.2e} of plain libtorch's (SGD; worst: "
              f"{worst_name})")
        if not worst <= WEIGHT_BOUND:
            failures.append(f"{what}: final weights {worst:.2e} from plain libtorch's (SGD; "
                            f"{worst_name}; bound {WEIGHT_BOUND})")

    if args.quick:
        against_plain("zero at 2 ranks, stage 0", run(2, "adam", "--stage", "0")["loss"], False)
        weights_against_plain("zero at 2 ranks, stage 0",
                              run(2, "sgd", "--stage", "0", state_dict=True)["weights"], False)
    else:
        for np in (1, 2, 3):
            runs = {stage: run(np, "adam", "--stage", str(stage)) for stage in range(4)}
            differ = [stage for stage in (1, 2, 3) if runs[stage]["loss"] != runs[0]["loss"]]
            for stage in differ:
                failures.append(f"{np} ranks: stage {stage}'s losses {runs[stage]['loss']} are "
                                f"not stage 0's {runs[0]['loss']}")
            print(f"{np} ranks: stages 0-3 {'DIFFER' if differ else 'bitwise alike'}, "
                  f"final loss {runs[0]['final_loss']:.9g}")
            against_plain(f"zero at {np} ranks", runs[0]["loss"], np == 1)
            for stage in (0, 3):
                sgd = run(np, "sgd", "--stage", str(stage), state_dict=True)
                weights_against_plain(f"zero at {np} ranks, stage {stage}", sgd["weights"],
                                      np == 1)

        ddp = run(2, "adam", trainer="ddp")
        against_plain("libtorch + c10d Gloo at 2 ranks", ddp["loss"], False)

        # The state_dict file, into PyTorch's own model.
        zero = run(2, "adam", "--stage", "3", state_dict=True)
        model = GPT(**CONFIG, tied_head=False, nested=False)
        model.load_state_dict(zero["weights"], strict=True)
        with open(data_file, "rb") as f:
            data = f.read()
        tokens, targets = reference.batch(data, STEPS, BATCH, CONFIG["seq"])
        with torch.no_grad():
            loss = model(tokens.long(), targets)[1].item()
        gap = abs(loss - zero["final_loss"]) / zero["final_loss"]
        print(f"state_dict of zero stage 3 at 2 ranks loaded into PyTorch's model: loss "
              f"{loss:.9g}, train_torch's {zero['final_loss']:.9g} (relative {gap:.1e})")
        if not gap <= 1e-5:
            failures.append(f"the state_dict's loss in PyTorch {loss} is not train_torch's "
                            f"{zero['final_loss']}")
    for name in state_files:
        if os.path.exists(name):
            os.remove(name)
    os.rmdir(work)
    if failures:
        sys.exit("check.py: FAILED\n  " + "\n  ".join(failures))
    print("check.py: passed")


if __name__ == "__main__":
    main()
