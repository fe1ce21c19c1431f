#!/usr/bin/python3
"""Writes tests/optim/fixtures/torch_reference.txt: trajectories of torch.optim.Adam, AdamW and
SGD that zero's optimizers must reproduce (tests/optim/torch_conformance_test.cpp).

torch has no switch for DeepSpeed's `bias_correction: false` (FusedAdam, DeepSpeedCPUAdam): those
cases run `adam_without_bias_correction`, torch 1.13's own single-tensor Adam step written out with
both corrections 1, in the same tensor operations (so the same roundings).

Needs PyTorch (Debian's python3-torch 1.13: run it as /usr/bin/python3 tests/optim/make_fixtures.py).
The tests themselves only read the committed file.

Every case starts from the same kind of data: fp32 parameters, and per step a gradient given in
the case's gradient type (float, half or bfloat16, possibly multiplied by a loss scale). PyTorch
sees that gradient converted to fp32 and multiplied by `grad_multiplier` (as zero's fused step
does on the fly), then runs one optimizer step. The file records, per step, the parameters and
the low-precision copy of the parameters, and the optimizer state after the last step.

Format: fixture_writer.py's; half and bfloat16 values are binary16 bit patterns in hex.
"""

import math

import torch

from fixture_writer import f32_hex, option_lines, write_fixture

STEPS = 8
SIZE = 37  # two 16-lane vectors and a partial one, four 8-lane vectors and a remainder

CASES = [
    # name, optimizer, options, grad type, loss scale, extra gradient multiplier (clipping)
    ("adam_default", "adam", {}, "float", 1.0, 1.0),
    ("adam_l2_custom", "adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1), "float", 1.0, 1.0),
    ("adam_maximize", "adam", dict(lr=1e-3, weight_decay=0.05, maximize=True), "float", 1.0, 1.0),
    ("adam_lr0", "adam", dict(lr=0.0), "float", 1.0, 1.0),
    ("adamw_default", "adamw", {}, "float", 1.0, 1.0),
    ("adamw_custom", "adamw", dict(lr=3e-3, betas=(0.85, 0.995), eps=1e-7, weight_decay=0.2), "float", 1.0, 1.0),
    ("adam_fp16_scaled", "adam", {}, "half", 1024.0, 1.0),
    ("adam_fp16_scaled_clipped", "adam", dict(weight_decay=0.01), "half", 4096.0, 0.37),
    ("adamw_bf16", "adamw", dict(lr=2e-3), "bfloat16", 1.0, 1.0),
    ("sgd_plain", "sgd", dict(lr=0.1), "float", 1.0, 1.0),
    ("sgd_weight_decay", "sgd", dict(lr=0.1, weight_decay=0.01), "float", 1.0, 1.0),
    ("sgd_momentum", "sgd", dict(lr=0.05, momentum=0.9), "float", 1.0, 1.0),
    ("sgd_dampening_wd", "sgd", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2), "float", 1.0, 1.0),
    ("sgd_nesterov", "sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2), "float", 1.0, 1.0),
    ("sgd_momentum_fp16_scaled", "sgd", dict(lr=0.05, momentum=0.9, maximize=True), "half", 512.0, 1.0),
    # DeepSpeed's bias_correction false (last, so that the cases above keep their seeds).
    ("adam_no_bias_correction", "adam", dict(lr=1e-2, weight_decay=0.1, bias_correction=False), "float", 1.0, 1.0),
    ("adamw_no_bias_correction", "adamw", dict(lr=3e-3, betas=(0.85, 0.995), eps=1e-7, bias_correction=False), "float", 1.0, 1.0),
    ("adamw_no_bias_correction_fp16", "adamw", dict(bias_correction=False), "half", 1024.0, 0.5),
]

TORCH_TYPES = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}


def u16_hex(t):
    return " ".join("%04x" % (int(x) & 0xFFFF) for x in t.view(torch.int16).tolist())


class AdamWithoutBiasCorrection:
    """torch 1.13's _single_tensor_adam (and AdamW's decoupled decay) with bias_correction1 and
    bias_correction2 fixed at 1: what DeepSpeed's bias_correction false computes."""

    def __init__(self, param, decoupled, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=None):
        self.param = param
        self.decoupled = decoupled
        self.lr, self.betas, self.eps = lr, betas, eps
        self.weight_decay = weight_decay if weight_decay is not None else (1e-2 if decoupled else 0.0)
        self.state = {param: dict(exp_avg=torch.zeros_like(param), exp_avg_sq=torch.zeros_like(param))}

    @torch.no_grad()
    def step(self):
        param, grad = self.param, self.param.grad
        exp_avg, exp_avg_sq = self.state[param]["exp_avg"], self.state[param]["exp_avg_sq"]
        beta1, beta2 = self.betas
        if self.decoupled:
            param.mul_(1 - self.lr * self.weight_decay)
        elif self.weight_decay != 0:
            grad = grad.add(param, alpha=self.weight_decay)
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
        bias_correction2_sqrt = math.sqrt(1.0)
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(self.eps)
        param.addcdiv_(exp_avg, denom, value=-self.lr)


def optimizer_options(optimizer, options):
    defaults = {
        "adam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, bias_correction=True),
        "adamw": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, bias_correction=True),
        "sgd": dict(lr=None, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False),
    }[optimizer]
    merged = dict(defaults, maximize=False)
    merged.update(options)
    return merged


def run_case(out, index, name, optimizer, options, grad_type, loss_scale, clip):
    generator = torch.Generator().manual_seed(1000 + index)
    param = torch.randn(SIZE, generator=generator, dtype=torch.float32)
    param.requires_grad_(True)
    if options.get("bias_correction", True):
        constructor = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[optimizer]
        opt = constructor([param], foreach=False, **{k: v for k, v in options.items() if k != "bias_correction"})
    else:
        kwargs = {k: v for k, v in options.items() if k != "bias_correction"}
        opt = AdamWithoutBiasCorrection(param, optimizer == "adamw", **kwargs)
    # The multiplier zero's fused step applies, rounded to float as it is there.
    multiplier = float(torch.tensor(clip / loss_scale, dtype=torch.float32))

    out.append("case %s" % name)
    out.append("optimizer %s" % optimizer)
    out.extend(option_lines(optimizer_options(optimizer, options)))
    out.append("grad_type %s" % grad_type)
    out.append("grad_multiplier %s" % f32_hex([multiplier]))
    out.append("size %d" % SIZE)
    out.append("steps %d" % STEPS)
    out.append("param0 %s" % f32_hex(param.detach()))
    for step in range(1, STEPS + 1):
        # Gradients of varied magnitude, with some exact zeros, stored in the gradient type.
        magnitude = torch.pow(10.0, torch.randint(-4, 1, (SIZE,), generator=generator).float())
        grad = torch.randn(SIZE, generator=generator) * magnitude * loss_scale
        grad[torch.randint(0, SIZE, (3,), generator=generator)] = 0.0
        stored = grad.to(TORCH_TYPES[grad_type])
        if grad_type == "float":
            out.append("grad %d %s" % (step, f32_hex(stored)))
        else:
            out.append("grad %d %s" % (step, u16_hex(stored)))
        param.grad = stored.float().mul(multiplier) if multiplier != 1.0 else stored.float()
        opt.step()
        out.append("param %d %s" % (step, f32_hex(param.detach())))
        if grad_type != "float":
            out.append("copy %d %s" % (step, u16_hex(param.detach().to(TORCH_TYPES[grad_type]))))
    state = opt.state[param]
    for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
        if key in state and state[key] is not None:
            out.append("state %s %s" % (key, f32_hex(state[key])))
    out.append("end")


def main():
    torch.set_num_threads(1)
    write_fixture("torch_reference.txt", [
        "torch.optim reference trajectories for zero's optimizers.",
        "Generated by tests/optim/make_fixtures.py with torch %s; do not edit." % torch.__version__,
    ], CASES, run_case)


if __name__ == "__main__":
    main()
