#!/usr/bin/python3
"""Writes tests/optim/fixtures/lamb_reference.txt: trajectories of LAMB as DeepSpeed's FusedLamb
computes it, which zero::Lamb must reproduce (tests/optim/lamb_test.cpp).

DeepSpeed's FusedLamb runs only on a GPU, so this is a reference written from its source
(deepspeed/ops/lamb/fused_lamb.py and csrc/lamb/fused_lamb_cuda_kernel.cu, eps_mode 1, the
default), per parameter tensor and step t:

    g = grad * grad_multiplier
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    u = m / (sqrt(v) + eps) + weight_decay * w        (lamb_cuda_kernel_part1)
    w_norm, u_norm = ||w||, ||u||                     (part1 and part2: block sums of squares)
    ratio = 1 if w_norm == 0 or u_norm == 0 else min(max(w_norm / u_norm, min_coeff), max_coeff)
    step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t) with bias correction, else lr
    w = w - step_size * ratio * u                     (lamb_cuda_kernel_part3)

Two references per case: every operation in float64 (the semantics), and the same in float32 with
the roundings of zero's element-wise functor (fma where it uses one, emulated through float64;
sums of squares in float64). Needs numpy only: /usr/bin/python3 tests/optim/make_lamb_fixtures.py.

Inputs come from integer formulas (initial_weights, gradient below, mirrored in lamb_test.cpp)
that both languages evaluate exactly, so the file holds only the expected weights: float32 after
steps 1, 2 and 10, float64 after steps 1 and 10. Format: fixture_writer.py's; float64 values
`%.9g`.
"""

import numpy as np

from fixture_writer import f32_hex, option_lines, write_fixture

STEPS = 10
RECORDED32 = (1, 2, 10)
RECORDED64 = (1, 10)
# Sizes: one element, a partial vector, one summation chunk (2048) and a bit.
SIZES = [1, 37, 2100]
MAGNITUDES = [1.0, 0.1, 0.01, 0.001]

CASES = [
    # name, options, loss scale and clipping as one gradient multiplier, weight scale per tensor
    ("defaults", dict(), 1.0, [1.0, 1.0, 1.0]),
    ("decay_and_multiplier", dict(lr=2e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01), 1.0 / 1024, [1.0, 0.3, 2.0]),
    ("no_bias_correction", dict(lr=1e-2, weight_decay=0.1, bias_correction=False), 1.0, [1.0, 1.0, 1.0]),
    # A zero tensor (ratio 1), large weights (ratio clamped to max_coeff), tiny ones (min_coeff).
    ("clamped_and_zero", dict(lr=1e-2, max_coeff=5.0, min_coeff=0.05), 1.0, [0.0, 300.0, 1e-5]),
]

DEFAULTS = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, bias_correction=True,
                max_coeff=10.0, min_coeff=0.01)


def f32(x):
    return np.float32(x) if np.isscalar(x) else np.asarray(x, dtype=np.float32)


def fma32(a, b, c):
    """a * b + c rounded once to float32 (the product of two float32 values is exact in float64;
    the float64 sum then rounds twice, which differs from one rounding in rare ties)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(np.float32)


def f64_text(values):
    return " ".join("%.9g" % float(x) for x in values)


def initial_weights(k, n, scale):
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(k * 97)) % np.uint64(4093)
    return f32((h.astype(np.float64) - 2046.0) / 1000.0 * scale)


def gradient(t, k, n, multiplier):
    """Varied magnitudes and some exact zeros, as the loss scale leaves them."""
    i = np.arange(n, dtype=np.int64)
    h = (i * 7919 + t * 104729 + k * 31) % 2001
    magnitude = np.array(MAGNITUDES)[(i + t) % 4]
    g = f32((h.astype(np.float64) - 1000.0) / 1000.0 * magnitude / multiplier)
    g[(i * 13 + t * 7 + k) % 10 == 0] = 0.0
    return g


def step_size(o, t):
    if not o["bias_correction"]:
        return o["lr"]
    b1, b2 = o["betas"]
    return o["lr"] * np.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)


def trust_ratio(o, w_sq, u_sq):
    w, u = np.sqrt(w_sq), np.sqrt(u_sq)
    if w == 0.0 or u == 0.0:
        return 1.0
    return min(max(w / u, o["min_coeff"]), o["max_coeff"])


def lamb64(o, w, m, v, grad, multiplier, t):
    b1, b2 = o["betas"]
    g = grad.astype(np.float64) * multiplier
    m = b1 * m + (1.0 - b1) * g
    v = b2 * v + (1.0 - b2) * g * g
    u = m / (np.sqrt(v) + o["eps"]) + o["weight_decay"] * w
    ratio = trust_ratio(o, np.sum(w * w), np.sum(u * u))
    return w - step_size(o, t) * ratio * u, m, v


def lamb32(o, w, m, v, grad, multiplier, t):
    b1, b2 = o["betas"]
    g = f32(grad) * f32(multiplier)
    m = fma32(g, f32(1.0 - b1), m * f32(b1))
    v = fma32(g * f32(1.0 - b2), g, v * f32(b2))
    u = m / (np.sqrt(v) + f32(o["eps"]))
    if o["weight_decay"] != 0.0:
        u = fma32(w, f32(o["weight_decay"]), u)
    w64, u64 = w.astype(np.float64), u.astype(np.float64)
    ratio = trust_ratio(o, np.sum(w64 * w64), np.sum(u64 * u64))
    neg_step = f32(-(step_size(o, t) * ratio))
    return fma32(neg_step, u, w), m, v


def run_case(out, index, name, options, multiplier, weight_scales):
    o = dict(DEFAULTS)
    o.update(options)
    out.append("case %s" % name)
    out.extend(option_lines(o))
    multiplier = float(np.float32(multiplier))
    out.append("grad_multiplier %s %r" % (f32_hex([multiplier]), multiplier))
    out.append("tensors %d" % len(SIZES))
    out.append("steps %d" % STEPS)
    w32, w64, m32, v32, m64, v64 = [], [], [], [], [], []
    for k, (n, scale) in enumerate(zip(SIZES, weight_scales)):
        out.append("size %d %d %r" % (k, n, float(scale)))
        w = initial_weights(k, n, scale)
        w32.append(w)
        w64.append(w.astype(np.float64))
        m32.append(np.zeros(n, np.float32))
        v32.append(np.zeros(n, np.float32))
        m64.append(np.zeros(n))
        v64.append(np.zeros(n))
    for t in range(1, STEPS + 1):
        for k, n in enumerate(SIZES):
            grad = gradient(t, k, n, multiplier)
            w32[k], m32[k], v32[k] = lamb32(o, w32[k], m32[k], v32[k], grad, multiplier, t)
            w64[k], m64[k], v64[k] = lamb64(o, w64[k], m64[k], v64[k], grad, multiplier, t)
            if t in RECORDED32:
                out.append("param32 %d %d %s" % (t, k, f32_hex(w32[k])))
            if t in RECORDED64:
                out.append("param64 %d %d %s" % (t, k, f64_text(w64[k])))
    out.append("end")


def main():
    write_fixture("lamb_reference.txt", [
        "LAMB reference trajectories (DeepSpeed FusedLamb semantics) for zero::Lamb.",
        "Generated by tests/optim/make_lamb_fixtures.py with numpy %s; do not edit." % np.__version__,
    ], CASES, run_case)


if __name__ == "__main__":
    main()
