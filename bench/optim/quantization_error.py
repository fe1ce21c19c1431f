#!/usr/bin/env python3
"""The error of 8-bit block-wise moments on real optimizer states: zero's map and quantizer
(include/zero/optim/dynamic_map.hpp, re-computed here in NumPy with the same values and decision
boundaries) against a reference that follows bitsandbytes' published map (its create_dynamic_map
definition, built with PyTorch in float32 as bitsandbytes builds it, each value quantized to the
nearest map entry).

    train_gpt ... --save-checkpoint CKPT
    zero-checkpoint consolidate CKPT --moments --to NPY
    /usr/bin/python3 bench/optim/quantization_error.py NPY [--block 2048]

For every exp_avg (signed map) and exp_avg_sq (unsigned map) it prints the relative L2 error of
the quantized moment, ||q(x) - x|| / ||x||, with both maps, and the same over all tensors.

    /usr/bin/python3 bench/optim/quantization_error.py NPY --update STEP [--eps 1e-8] \
        [--betas 0.9 0.999] [--min-elements 4096]

prints instead, for every tensor of at least --min-elements whose two moments are there, what the
quantization does to Adam's direction at that step, u = m_hat / (sqrt(v_hat) + eps) with the bias
corrections of STEP: the relative L2 error of u computed from both moments quantized with zero's
map, its 99th percentile of |u_q / u|, and the share of elements whose second moment quantizes to
0 while it is not (the "zero point", where u_q would be m / eps).
"""

import argparse
import glob
import os

import numpy as np
import torch


def bitsandbytes_map(signed):
    """bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7, total_bits=8), as its
    definition computes it: torch.linspace and the midpoints in float32."""
    data = []
    for i in range(7):
        items = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        boundaries = torch.linspace(0.1, 1, items)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0.0, 1.0]
    return np.sort(np.array(data, dtype=np.float32))


def zero_map(signed):
    """zero::DynamicMap: the values (double, rounded once) and the decision boundaries (the edges
    of each decade's equal steps, fl(lo + step j) as one fused multiply-add; next to 0, between
    decades and next to 1 the midpoint of the two values)."""
    values, boundaries_above_zero = [], []
    edges = []
    for d in range(7):
        scale = 10.0 ** (d - 6)
        fractions = 2 ** d if signed else 2 ** (d + 1)
        step = 0.9 / fractions
        for j in range(fractions):
            mean = 0.1 + step * (j + 0.5)
            values.append(np.float32(scale * mean))
            if signed:
                values.append(np.float32(-scale * mean))
        lo, size = np.float32(scale * 0.1), np.float32(scale * step)
        edges.append([np.float32(float(size) * j + float(lo)) for j in range(1, fractions)])
    values = np.sort(np.array(values + [0.0, 1.0], dtype=np.float32))
    middle = 127 if signed else 0

    def midpoint(code):
        return np.float32(values[code] + (values[code + 1] - values[code]) / np.float32(2))

    code = middle
    boundaries_above_zero.append(midpoint(code))  # next to 0
    code += 1
    for d in range(7):
        boundaries_above_zero += edges[d]
        code += len(edges[d])
        if d < 6:
            boundaries_above_zero.append(midpoint(code))  # between decades
            code += 1
    boundaries_above_zero.append(midpoint(254))  # next to 1
    return values, np.array(boundaries_above_zero, dtype=np.float32), middle


def quantize_zero(x, signed):
    values, above, middle = zero_map(signed)
    a = np.abs(x)
    # x >= 0: boundaries below a; x < 0: boundaries at or below a (ties to the smaller value).
    count = np.where(np.signbit(x), np.searchsorted(above[:127] if signed else above, a, "right"),
                     np.searchsorted(above, a, "left"))
    codes = np.clip(np.where(np.signbit(x), middle - count, middle + count), 0, 255)
    return values[codes], codes


def quantize_nearest(x, table):
    index = np.clip(np.searchsorted(table, x), 1, len(table) - 1)
    lower, upper = table[index - 1], table[index]
    codes = np.where(x - lower <= upper - x, index - 1, index)
    return table[codes], codes


def blockwise(x, block, quantize):
    flat = x.astype(np.float32).ravel()
    out = np.zeros_like(flat)
    codes = np.zeros(flat.size, dtype=np.int64)
    for begin in range(0, flat.size, block):
        part = flat[begin:begin + block]
        scale = np.float32(np.max(np.abs(part)))
        if scale == 0:
            continue
        values, part_codes = quantize(part * (np.float32(1) / scale))
        out[begin:begin + block] = values * scale
        codes[begin:begin + block] = part_codes
    return out, codes


def update_error(args):
    """Adam's direction from quantized moments against the direction from the fp32 ones."""
    beta1, beta2 = args.betas
    first, second = 1 - beta1 ** args.update, 1 - beta2 ** args.update
    print(f"{'tensor':40s} {'elements':>9s} {'rel L2 of u':>11s} {'p99 |uq/u|':>10s} "
          f"{'v to 0':>8s}")
    for path in sorted(glob.glob(os.path.join(args.moments, "*.exp_avg.npy"))):
        name = os.path.basename(path)[:-len(".exp_avg.npy")]
        second_path = path[:-len("exp_avg.npy")] + "exp_avg_sq.npy"
        if not os.path.exists(second_path):
            continue
        m = np.load(path).astype(np.float32).ravel()
        v = np.load(second_path).astype(np.float32).ravel()
        if m.size < args.min_elements:
            continue
        mq = blockwise(m, args.block, lambda x: quantize_zero(x, True))[0].astype(np.float64)
        vq = blockwise(v, args.block, lambda x: quantize_zero(x, False))[0].astype(np.float64)
        u = (m / first) / (np.sqrt(v / second) + args.eps)
        uq = (mq / first) / (np.sqrt(vq / second) + args.eps)
        ratio = np.abs(uq[u != 0] / u[u != 0])
        zero_point = np.count_nonzero((vq == 0) & (v > 0)) / v.size
        print(f"{name:40s} {m.size:9d} {np.linalg.norm(uq - u) / np.linalg.norm(u):11.4f} "
              f"{np.percentile(ratio, 99):10.4f} {zero_point * 100:7.3f}%")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("moments", help="a directory of .npy files from zero-checkpoint "
                                        "consolidate --moments")
    parser.add_argument("--block", type=int, default=2048)
    parser.add_argument("--update", type=int, metavar="STEP",
                        help="the error of Adam's direction at this step instead (see above)")
    parser.add_argument("--eps", type=float, default=1e-8)
    parser.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.999))
    parser.add_argument("--min-elements", type=int, default=4096)
    args = parser.parse_args()
    if args.update is not None:
        return update_error(args)
    references = {s: bitsandbytes_map(s) for s in (True, False)}
    totals = {}
    print(f"{'tensor':60s} {'elements':>9s} {'zero':>10s} {'bnb map':>10s}")
    for path in sorted(glob.glob(os.path.join(args.moments, "*.exp_avg*.npy"))):
        name = os.path.basename(path)[:-4]
        signed = not name.endswith("exp_avg_sq")
        x = np.load(path).astype(np.float32).ravel()
        norm = float(np.linalg.norm(x))
        if norm == 0:
            continue
        ours, our_codes = blockwise(x, args.block, lambda v: quantize_zero(v, signed))
        theirs, their_codes = blockwise(x, args.block,
                                        lambda v: quantize_nearest(v, references[signed]))
        errors = (float(np.linalg.norm(ours - x)), float(np.linalg.norm(theirs - x)))
        differ = int(np.count_nonzero(our_codes != their_codes))
        kind = "exp_avg" if signed else "exp_avg_sq"
        t = totals.setdefault(kind, [0.0, 0.0, 0.0, 0, 0])
        t[4] += differ
        t[0] += errors[0] ** 2
        t[1] += errors[1] ** 2
        t[2] += norm ** 2
        t[3] += x.size
        print(f"{name:60s} {x.size:9d} {errors[0] / norm:10.3e} {errors[1] / norm:10.3e}")
    for kind, (ours, theirs, norm, count, differ) in totals.items():
        print(f"{'all ' + kind:60s} {count:9d} {(ours / norm) ** 0.5:10.6e} "
              f"{(theirs / norm) ** 0.5:10.6e}  ({differ} codes differ)")


if __name__ == "__main__":
    main()
