"""The GPT of examples/train_gpt/gpt.hpp in PyTorch: examples/common/torch_gpt.py's GPT (nanoGPT's
model.py with biases, no dropout, a byte vocabulary of 256, GELU's tanh approximation) with the
head tied to the token embedding. Its state_dict names are nanoGPT's (transformer.wte.weight,
transformer.h.0.attn.c_attn.weight, ...), which are also the names the C++ side registers and
writes.

Weights travel as one float32 .npy file per parameter, <name>.npy, in torch's shape (the tied
lm_head has no file). Data is a byte file; step s's global batch is `batch` sequences, sequence b
starting at ((s * batch + b) * seq) mod (len(data) - seq - 1), its targets one byte further, and
rank r of N ranks takes the r-th contiguous share of the sequences.

As a script it trains on the full global batch in fp32 (or with --autocast bf16, the forward pass
in bfloat16 under torch.autocast; --device cuda on a GPU) and prints `step S loss X` per step:
    reference.py --layers 4 --heads 4 --embd 64 --seq 64 --batch 8 --steps 20 \
        --optimizer adamw --lr 1e-3 --weight-decay 0.1 --data README.md --init-npy DIR
Needs torch 1.13 or later and numpy; init_npy and batch_starts need numpy only.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

VOCAB = 256


def parameter_shapes(layers, embd, seq, vocab=VOCAB):
    """{name: shape} of every parameter, in the order the C++ side registers them."""
    c = embd
    shapes = {"transformer.wte.weight": (vocab, c), "transformer.wpe.weight": (seq, c)}
    for i in range(layers):
        p = f"transformer.h.{i}."
        shapes.update({
            p + "ln_1.weight": (c,), p + "ln_1.bias": (c,),
            p + "attn.c_attn.weight": (3 * c, c), p + "attn.c_attn.bias": (3 * c,),
            p + "attn.c_proj.weight": (c, c), p + "attn.c_proj.bias": (c,),
            p + "ln_2.weight": (c,), p + "ln_2.bias": (c,),
            p + "mlp.c_fc.weight": (4 * c, c), p + "mlp.c_fc.bias": (4 * c,),
            p + "mlp.c_proj.weight": (c, 4 * c), p + "mlp.c_proj.bias": (c,),
        })
    shapes.update({"transformer.ln_f.weight": (c,), "transformer.ln_f.bias": (c,)})
    return shapes


def init_npy(directory, layers, heads, embd, seq, seed):
    """Writes a deterministic initial model into `directory`: weights and embeddings drawn from
    N(0, 0.02^2), biases zero, LayerNorm weights one."""
    if embd % heads:
        raise ValueError(f"embd {embd} is not a multiple of heads {heads}")
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, shape in parameter_shapes(layers, embd, seq).items():
        if name.endswith(".bias"):
            value = np.zeros(shape)
        elif len(shape) == 1:  # a LayerNorm's weight
            value = np.ones(shape)
        else:
            value = rng.normal(0.0, 0.02, shape)
        np.save(os.path.join(directory, name + ".npy"), value.astype(np.float32))


def batch_starts(size, step, batch, seq, rank=0, ranks=1):
    """Where this rank's sequences of step `step` start in data of `size` bytes."""
    if batch % ranks:
        raise ValueError(f"batch {batch} does not split over {ranks} ranks")
    share = batch // ranks
    span = size - seq - 1
    if span <= 0:
        raise ValueError(f"{size} bytes of data are too few for sequences of {seq}")
    return [((step * batch + b) * seq) % span for b in range(rank * share, (rank + 1) * share)]


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
try:
    import torch
    from torch_gpt import GPT  # noqa: F401 (the model: one for both examples' comparisons)
except ImportError:  # the numpy half above still works
    torch = None

if torch is not None:

    def saved_parameters(model):
        """The parameters a .npy directory holds: the state_dict without the tied head."""
        return {k: v for k, v in model.state_dict().items() if not k.startswith("lm_head.")}

    def load_npy(model, directory):
        with torch.no_grad():
            for name, tensor in saved_parameters(model).items():
                value = np.load(os.path.join(directory, name + ".npy"))
                if tuple(value.shape) != tuple(tensor.shape):
                    raise ValueError(f"{name}: file shape {value.shape}, model {tuple(tensor.shape)}")
                tensor.copy_(torch.from_numpy(value))

    def save_npy(model, directory):
        os.makedirs(directory, exist_ok=True)
        for name, tensor in saved_parameters(model).items():
            np.save(os.path.join(directory, name + ".npy"),
                    np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=np.float32))

    def batch(data, step, batch, seq, rank=0, ranks=1):
        """(inputs, targets) of this rank's share of step `step`'s global batch: [share, seq], the
        inputs uint8 and the targets long (what cross_entropy takes)."""
        starts = batch_starts(len(data), step, batch, seq, rank, ranks)
        bytes_ = np.frombuffer(data, dtype=np.uint8)
        inputs = np.stack([bytes_[o:o + seq] for o in starts])
        targets = np.stack([bytes_[o + 1:o + seq + 1] for o in starts])
        return torch.from_numpy(inputs.copy()), torch.from_numpy(targets.astype(np.int64))

    def make_optimizer(model, optimizer, lr, weight_decay):
        kinds = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
        if optimizer not in kinds:
            raise ValueError(f"unknown optimizer {optimizer!r} (adam or adamw)")
        return kinds[optimizer](model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=weight_decay)

    def train(model, data, steps, batch_size, optimizer="adam", lr=1e-3, weight_decay=0.0,
              step_seconds=None, on_step=None, autocast=None):
        """Trains `steps` steps on the full global batch and returns the losses. Appends each step's
        wall time to `step_seconds` when given; calls on_step(step, loss) after each step. The
        batches go where the model's parameters are; `autocast` (torch.bfloat16, say) runs the
        forward pass under torch.autocast on that device."""
        opt = make_optimizer(model, optimizer, lr, weight_decay)
        device = next(model.parameters()).device
        losses = []
        for step in range(steps):
            start = time.perf_counter()
            inputs, targets = batch(data, step, batch_size, model.seq)
            inputs, targets = inputs.to(device), targets.to(device)
            with torch.autocast(device.type, dtype=autocast or torch.bfloat16,
                                enabled=autocast is not None):
                _, loss = model(inputs.long(), targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if step_seconds is not None:
                step_seconds.append(time.perf_counter() - start)
            if on_step:
                on_step(step, losses[-1])
        return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--embd", type=int, default=64)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8, help="global batch, in sequences")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--optimizer", choices=("adam", "adamw"), default="adam")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--data", required=True, help="a file of bytes to model")
    parser.add_argument("--init-npy", required=True, help="directory of initial weights")
    parser.add_argument("--init-seed", type=int,
                        help="first write a fresh init_npy model with this seed into --init-npy")
    parser.add_argument("--save-npy", help="directory to write the trained weights to")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads")
    parser.add_argument("--json", help='writes {"loss": [...], "tokens_per_second": ...}')
    parser.add_argument("--device", default="cpu", help="where the model trains (cpu, cuda)")
    parser.add_argument("--autocast", choices=("bf16",),
                        help="the forward pass under torch.autocast in bfloat16 (default: fp32)")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    with open(args.data, "rb") as f:
        data = f.read()
    if args.init_seed is not None:
        init_npy(args.init_npy, args.layers, args.heads, args.embd, args.seq, args.init_seed)
    model = GPT(args.layers, args.heads, args.embd, args.seq)
    load_npy(model, args.init_npy)
    model.to(args.device)
    if args.device.startswith("cuda"):
        # fp32 products in fp32, as train_gpt --device cuda computes them: TF32 would round their
        # inputs to 10 bits of mantissa.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    seconds = []
    losses = train(model, data, args.steps, args.batch, args.optimizer, args.lr,
                   args.weight_decay, seconds,
                   on_step=lambda step, loss: print(f"step {step} loss {loss:.8f}", flush=True),
                   autocast=torch.bfloat16 if args.autocast == "bf16" else None)
    if args.save_npy:
        save_npy(model, args.save_npy)
    if args.json:
        timed = seconds[1:]  # the first step pays for allocation and warm-up
        tokens = args.batch * args.seq * len(timed)
        with open(args.json, "w") as f:
            json.dump({"loss": losses,
                       "tokens_per_second": tokens / sum(timed) if timed else None}, f)


if __name__ == "__main__":
    main()
