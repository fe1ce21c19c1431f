#!/usr/bin/env python3
"""Checks train_torch (zero::torch) against itself and against PyTorch.

1. At 1, 2 and 3 ranks, stages 0-3 give the same loss at every step, bit for bit.
2. Those losses match plain libtorch's (one process, the whole batch, torch::optim::Adam) within
   BOUND, relative. Measured here after 6 steps: equal bit for bit at 1 rank; at 2 and 3 ranks at
   most 1.5e-7 (each rank's loss and gradient are means over its share, averaged over the ranks:
   the same sums in another order).
3. libtorch's own data parallel run (--trainer ddp, c10d's Gloo) at 2 ranks gives the same within
   BOUND.
4. The state_dict file zero writes loads into this file's PyTorch twin of the model with
   load_state_dict(strict=True), whose loss on the next batch is the one train_torch computed with
   its final weights.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

BOUND = 1e-5
STEPS = 6
CONFIG = dict(layers=2, heads=4, embd=64, seq=32, vocab=256)
BATCH = 12


class Attention(nn.Module):
    def __init__(self, embd, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(embd, 3 * embd)
        self.c_proj = nn.Linear(embd, embd)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.heads
        q, k, v = self.c_attn(x).split(c, 2)
        q, k, v = (z.view(b, t, self.heads, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(future, float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class Mlp(nn.Module):
    def __init__(self, embd):
        super().__init__()
        self.c_fc = nn.Linear(embd, 4 * embd)
        self.c_proj = nn.Linear(4 * embd, embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, embd, heads):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(embd), Attention(embd, heads)
        self.ln_2, self.mlp = nn.LayerNorm(embd), Mlp(embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, layers, heads, embd, seq, vocab):
        super().__init__()
        self.vocab = vocab
        self.wte, self.wpe = nn.Embedding(vocab, embd), nn.Embedding(seq, embd)
        self.h = nn.ModuleList(Block(embd, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(embd)
        self.lm_head = nn.Linear(embd, vocab, bias=False)

    def loss(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, self.vocab), targets.reshape(-1))


def batch(data, step, seq, count):
    """train_gpt's data rule (examples/train_gpt/data.hpp): the global batch of `step`."""
    span = len(data) - seq - 1
    rows = [((step * BATCH + b) * seq) % span for b in range(count)]
    tokens = torch.tensor([list(data[o:o + seq]) for o in rows], dtype=torch.long)
    targets = torch.tensor([list(data[o + 1:o + seq + 1]) for o in rows], dtype=torch.long)
    return tokens, targets


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
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).view(entry["shape"])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-torch", required=True)
    parser.add_argument("--mpiexec", required=True)
    args = parser.parse_args()
    data_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
    failures = []
    work = tempfile.mkdtemp(prefix="zero-train-torch-")

    def run(np, *flags):
        out = os.path.join(work, "run.json")
        command = [args.mpiexec, "-np", str(np), "--oversubscribe", args.train_torch,
                   "--steps", str(STEPS), "--data", data_file, "--json", out, *flags]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            sys.exit(f"check.py: {' '.join(command)} failed ({done.returncode}):\n"
                     f"{done.stdout}{done.stderr}")
        with open(out) as f:
            return json.load(f)

    plain = run(1, "--trainer", "plain")
    print(f"plain libtorch, 1 rank: final loss {plain['final_loss']:.9g}")

    def against_plain(what, losses):
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, plain["loss"]))
        print(f"  {what}: largest relative difference from plain libtorch {worst:.2e}")
        if not worst <= BOUND:
            failures.append(f"{what}: {worst:.2e} from plain libtorch (bound {BOUND})")

    for np in (1, 2, 3):
        runs = {stage: run(np, "--stage", str(stage)) for stage in range(4)}
        differ = [stage for stage in (1, 2, 3) if runs[stage]["loss"] != runs[0]["loss"]]
        for stage in differ:
            failures.append(f"{np} ranks: stage {stage}'s losses {runs[stage]['loss']} are not "
                            f"stage 0's {runs[0]['loss']}")
        print(f"{np} ranks: stages 0-3 {'DIFFER' if differ else 'bitwise alike'}, "
              f"final loss {runs[0]['final_loss']:.9g}")
        against_plain(f"zero at {np} ranks", runs[0]["loss"])

    ddp = run(2, "--trainer", "ddp")
    against_plain("libtorch + c10d Gloo at 2 ranks", ddp["loss"])

    # The state_dict file, into PyTorch's own model.
    state_file = os.path.join(work, "model.safetensors")
    zero = run(2, "--stage", "3", "--save-state-dict", state_file)
    model = Gpt(**CONFIG)
    model.load_state_dict(load_safetensors(state_file), strict=True)
    with open(data_file, "rb") as f:
        data = f.read()
    with torch.no_grad():
        loss = model.loss(*batch(data, STEPS, CONFIG["seq"], BATCH)).item()
    gap = abs(loss - zero["final_loss"]) / zero["final_loss"]
    print(f"state_dict of zero stage 3 at 2 ranks loaded into PyTorch's model: loss {loss:.9g}, "
          f"train_torch's {zero['final_loss']:.9g} (relative {gap:.1e})")
    if not gap <= 1e-5:
        failures.append(f"the state_dict's loss in PyTorch {loss} is not train_torch's "
                        f"{zero['final_loss']}")
    for name in (state_file, os.path.join(work, "run.json")):
        if os.path.exists(name):
            os.remove(name)
    os.rmdir(work)
    if failures:
        sys.exit("check.py: FAILED\n  " + "\n  ".join(failures))
    print("check.py: passed")


if __name__ == "__main__":
    main()
