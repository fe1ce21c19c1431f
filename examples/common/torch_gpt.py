"""The examples' GPT in PyTorch: nanoGPT's model.py with biases, no dropout, GELU's tanh
approximation and pre-LayerNorm blocks, the twin of both C++ GPTs:

- examples/train_gpt/gpt.hpp (zero's own layers): GPT(..., tied_head=True, nested=True), the head
  tied to the token embedding and nanoGPT's state_dict names (transformer.wte.weight,
  transformer.h.0.attn.c_attn.weight, ...); examples/train_gpt/reference.py builds on it;
- examples/train_torch/gpt.hpp (torch::nn modules through zero::torch): GPT(..., tied_head=False,
  nested=False), an untied head and the modules at the top (wte.weight, h.0.attn.c_attn.weight,
  lm_head.weight), so that the state_dict file zero::torch writes loads with strict=True.

Needs torch 1.13 or later.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256  # a byte vocabulary


class CausalSelfAttention(nn.Module):
    def __init__(self, heads, embd, seq):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(embd, 3 * embd)
        self.c_proj = nn.Linear(embd, embd)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.causal[:T, :T], float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, embd):
        super().__init__()
        self.c_fc = nn.Linear(embd, 4 * embd)
        self.c_proj = nn.Linear(4 * embd, embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, heads, embd, seq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embd, eps=1e-5)
        self.attn = CausalSelfAttention(heads, embd, seq)
        self.ln_2 = nn.LayerNorm(embd, eps=1e-5)
        self.mlp = MLP(embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """tied_head: lm_head.weight is transformer.wte.weight (train_gpt); nested: the embeddings,
    blocks and final norm live under `transformer.` as nanoGPT names them (train_gpt), else at
    the top of the module (train_torch)."""

    def __init__(self, layers, heads, embd, seq, vocab=VOCAB, tied_head=True, nested=True):
        super().__init__()
        self.seq = seq
        body = dict(
            wte=nn.Embedding(vocab, embd),
            wpe=nn.Embedding(seq, embd),
            h=nn.ModuleList(Block(heads, embd, seq) for _ in range(layers)),
            ln_f=nn.LayerNorm(embd, eps=1e-5),
        )
        if nested:
            self.transformer = nn.ModuleDict(body)
        else:
            for name, module in body.items():
                self.add_module(name, module)
        self.lm_head = nn.Linear(embd, vocab, bias=False)
        if tied_head:
            self.body().wte.weight = self.lm_head.weight

    def body(self):
        """The module holding wte, wpe, h and ln_f."""
        return self.transformer if hasattr(self, "transformer") else self

    def forward(self, tokens, targets=None):
        """Logits [B, T, vocab]; with targets, the mean cross-entropy over all tokens too."""
        body = self.body()
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = body.wte(tokens) + body.wpe(positions)
        for block in body.h:
            x = block(x)
        logits = self.lm_head(body.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
