#!/usr/bin/env python3
"""train_gpt's checkpoints under tensor parallelism, end to end:
  - saved at TP 2 x DP 2, stage 3, after 3 of 6 steps, and resumed on the same grid: the same
    final weights, bit for bit, as the run that never stopped;
  - resumed at TP 2 x DP 1, stage 1 (another data-parallel size and stage): the same model within
    rounding (the data-parallel sums run in another order), its losses within 1e-6;
  - resumed at another tensor-parallel size: refused, naming both sizes;
  - consolidated by zero-checkpoint into one safetensors file of whole tensors under the GPT's
    names (the per-head slices re-interleaved, the vocabulary's padding dropped), equal bit for
    bit to the weights train_gpt saved whole, and loaded by PyTorch into reference.py's GPT, whose
    loss on a batch is the one train_gpt reports.

    tensor_parallel_checkpoint_test.py --train-gpt PATH --zero-checkpoint PATH --mpirun PATH
                                       --data FILE

Prints "agree" on success.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

MODEL = ["--layers", "2", "--embd", "48", "--heads", "6", "--seq", "16", "--batch", "8",
         "--deterministic", "--optimizer", "adamw", "--weight-decay", "0.01"]


def run(args, ranks, flags, fails=False):
    command = [args.mpirun, "-np", str(ranks), "--oversubscribe", args.train_gpt] + MODEL + \
        ["--data", args.data] + flags
    done = subprocess.run(command, capture_output=True, text=True)
    if fails:
        if done.returncode == 0:
            sys.exit(f"{' '.join(command)} should have failed:\n{done.stdout}")
        return done.stdout + done.stderr
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def load_dir(directory):
    return {name[:-4]: np.load(os.path.join(directory, name))
            for name in sorted(os.listdir(directory))}


def read_safetensors(path):
    """The format read with numpy alone: an 8-byte little-endian header length, a JSON header,
    then the data."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(raw[8 + length + begin:8 + length + end],
                                      dtype="<f4").reshape(entry["shape"])
    return tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-gpt", required=True)
    parser.add_argument("--zero-checkpoint", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--data", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = lambda *p: os.path.join(tmp, *p)  # noqa: E731
        grid = ["--tp", "2", "--stage", "3"]
        run(args, 4, grid + ["--steps", "6", "--save-npy", path("straight"),
                             "--json", path("straight.json")])
        run(args, 4, grid + ["--steps", "3", "--save-checkpoint", path("ckpt"),
                             "--save-npy", path("at3")])
        out = run(args, 4, grid + ["--steps", "6", "--load-checkpoint", path("ckpt"),
                                   "--save-npy", path("resumed")])
        if "resumed from" not in out:
            sys.exit("the resumed run did not say it resumed:\n" + out)
        straight, resumed = load_dir(path("straight")), load_dir(path("resumed"))
        for name, value in straight.items():
            if value.tobytes() != resumed[name].tobytes():
                sys.exit(f"resumed on the same grid, {name} differs from the uninterrupted run's")
        print("TP 2 x DP 2, stage 3: resumed after 3 of 6 steps, bitwise the uninterrupted run")

        run(args, 2, ["--tp", "2", "--stage", "1", "--steps", "6", "--load-checkpoint",
                      path("ckpt"), "--save-npy", path("other"), "--json", path("other.json")])
        with open(path("straight.json")) as f:
            want = json.load(f)["loss"][3:]
        with open(path("other.json")) as f:
            got = json.load(f)["loss"]
        worst_loss = max(abs(a - b) / abs(b) for a, b in zip(got, want))
        other = load_dir(path("other"))

        def apart(name, a, b):
            # The attention's key bias has a true gradient of zero, so both runs' gradients there
            # are rounding noise, which Adam turns into steps of up to lr: compared without it
            # (as compare_with_torch.py explains).
            if name.endswith("attn.c_attn.bias"):
                third = a.shape[0] // 3
                a, b = np.delete(a, slice(third, 2 * third)), np.delete(b, slice(third, 2 * third))
            return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
        worst = max(apart(n, other[n], v) for n, v in straight.items())
        if worst_loss > 1e-6 or worst > 1e-5:
            sys.exit(f"resumed at TP 2 x DP 1, stage 1: losses {worst_loss:.2e}, weights "
                     f"{worst:.2e} from the uninterrupted run's (bounds 1e-6, 1e-5)")
        print(f"TP 2 x DP 1, stage 1: resumed, losses within {worst_loss:.1e} and weights within "
              f"{worst:.1e} of the uninterrupted TP 2 x DP 2 run")

        refused = run(args, 2, ["--tp", "1", "--stage", "3", "--steps", "6", "--load-checkpoint",
                                path("ckpt")], fails=True)
        if "tensor" not in refused or "2" not in refused:
            sys.exit("resuming at TP 1 was refused without naming the sizes:\n" + refused)
        line = next((l for l in refused.splitlines() if "tensor" in l), "")
        print(f"TP 1 refused: {line.strip()}")

        out = path("model.safetensors")
        done = subprocess.run([args.zero_checkpoint, "consolidate", path("ckpt"), "--to", out],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"zero-checkpoint consolidate failed:\n{done.stdout}{done.stderr}")
        whole, at3 = read_safetensors(out), load_dir(path("at3"))
        if sorted(whole) != sorted(at3):
            sys.exit(f"consolidated tensors {sorted(whole)}, train_gpt's {sorted(at3)}")
        for name, value in at3.items():
            if whole[name].shape != value.shape or whole[name].tobytes() != value.tobytes():
                sys.exit(f"consolidated {name} {whole[name].shape} differs from train_gpt's "
                         f"{value.shape}")
        # PyTorch takes the file's tensors into the same GPT, and its loss on step 3's batch is
        # the one train_gpt reported for step 3 (computed from the same weights).
        model = reference.GPT(2, 6, 48, 16)
        with reference.torch.no_grad():
            for name, tensor in reference.saved_parameters(model).items():
                if tuple(whole[name].shape) != tuple(tensor.shape):
                    sys.exit(f"{name}: consolidated {whole[name].shape}, PyTorch's "
                             f"{tuple(tensor.shape)}")
                tensor.copy_(reference.torch.from_numpy(whole[name].copy()))
            with open(args.data, "rb") as f:
                inputs, targets = reference.batch(f.read(), 3, 8, 16)
            _, loss = model(inputs.long(), targets)
        with open(path("straight.json")) as f:
            reported = json.load(f)["loss"][3]
        if abs(loss.item() - reported) > 1e-6 * abs(reported):
            sys.exit(f"PyTorch's loss from the consolidated weights {loss.item():.8f}, "
                     f"train_gpt's at step 3 {reported:.8f}")
        print(f"consolidated {len(whole)} whole tensors into one safetensors file, bitwise "
              f"train_gpt's own; PyTorch's loss from them {loss.item():.7f}, train_gpt's "
              f"{reported:.7f}")
    print("agree")


if __name__ == "__main__":
    main()
