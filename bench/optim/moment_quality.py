#!/usr/bin/env python3
"""Training quality of 8-bit block-wise Adam moments against fp32 moments: train_gpt and train_mlp
each trained from seeds 1-3, once with --moment-bits 32 and once with --moment-bits 8 (the same
seed and batches in both runs of a pair), their per-step losses read from the demos' --json
reports. train_gpt marks its embedding layer to keep fp32 moments.

    export OMP_NUM_THREADS=1 Q=/tmp/moment-quality
    G=build/dev/examples/train_gpt/train_gpt M=build/dev/examples/train_mlp/train_mlp
    GPT="--layers 4 --embd 128 --heads 4 --seq 64 --config bench/optim/moment_quality_gpt.json \\
         --steps 2000 --print-every 100"
    MLP="--stage 1 --steps 2000 --print-every 100"
    for s in 1 2 3; do for b in 32 8; do
      $G $GPT --seed $s --moment-bits $b --json $Q/gpt_$b-bit_s$s.json > $Q/gpt_$b-bit_s$s.log
      $M $MLP --seed $s --moment-bits $b --json $Q/mlp_$b-bit_s$s.json > $Q/mlp_$b-bit_s$s.log
    done; done
    /usr/bin/python3 bench/optim/moment_quality.py --dir $Q

(train_gpt on its default data, the repository's docs, with the optimizer of GPT recipes from its
config: bf16, AdamW at 6e-4 (constant: train_gpt has no schedule), betas 0.9/0.95, weight decay
0.1, stage 1; its seed sets the initial weights only. With train_gpt's own defaults instead
(Adam(W) at 1e-3, betas 0.9/0.999) this model's final loss is chaotic: the fp32 runs of seeds 1-3
end 66% apart, and the 8-bit runs +6%, +26% and -16% from them. train_mlp on its default
teacher task, Adam at 1e-3 constant, whose seed also draws the data. One rank, one thread.)

It prints, for each demo and seed, the mean loss of the last 50 steps of both runs and their
relative difference ((8-bit - fp32) / fp32), the mean of those differences and the spread of the
fp32 runs over the seeds, and writes an SVG (plain SVG written here: the project depends on Debian
packages only) with one panel per demo: seed 1's two loss curves, smoothed by a moving mean, on a
logarithmic loss axis.

    /usr/bin/python3 bench/optim/moment_quality.py --dir DIR [--seeds 1 2 3] \\
        [--out docs/moment-quality.svg] [--last 50] [--smooth 50] \\
        [--variants NAME=LABEL ...] [--title TEXT]

--variants names the runs to compare, the first the baseline: reports PREFIX_NAME_sSEED.json,
drawn as LABEL (default: 32-bit="fp32 moments" 8-bit="8-bit moments"). Split master weights are
compared the same way (docs/optimizers.md, "Split master weights"):

    export OMP_NUM_THREADS=1 Q=/tmp/master-quality
    for s in 1 2 3; do
      for v in "fp32:0:32" "split16:16:32" "split8:8:32" "split8m8:8:8"; do
        IFS=: read name bits moments <<< "$v"
        $G $GPT --seed $s --master-residual-bits $bits --moment-bits $moments \\
           --json $Q/gpt_${name}_s$s.json > $Q/gpt_${name}_s$s.log
        $M $MLP --dtype bf16 --seed $s --master-residual-bits $bits --moment-bits $moments \\
           --json $Q/mlp_${name}_s$s.json > $Q/mlp_${name}_s$s.log
      done
    done
    /usr/bin/python3 bench/optim/moment_quality.py --dir $Q --out docs/master-quality.svg \\
        --title "fp32 master against split masters" --variants "fp32=fp32 states" \\
        "split16=16-bit residual" "split8=8-bit residual" "split8m8=8-bit residual, 8-bit moments"
"""

import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (panel title, the prefix of its reports' names), as the commands above write them.
DEMOS = [("train_gpt", "gpt"), ("train_mlp", "mlp")]
COLOURS = ["#1f5fa8", "#d9531e", "#2e8b3a", "#8a3fb0"]


def losses(path):
    with open(path) as f:
        report = json.load(f)
    values = report["loss"]
    if any(v is None for v in values):
        sys.exit(f"{path}: a step's loss is not finite")
    return report.get("first_step", 0), [float(v) for v in values]


def last_mean(values, n):
    tail = values[-n:]
    return sum(tail) / len(tail)


def moving_mean(values, window):
    """The mean of the `window` values up to each step (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def nice_ticks(lo, hi):
    """Loss-axis ticks on a log scale: 1, 2 and 5 times powers of ten inside [lo, hi], or every
    integer times them where that gives fewer than three."""
    for mantissas in ((1, 2, 5), range(1, 10)):  # every integer mantissa on a narrow range
        ticks = []
        for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
            for m in mantissas:
                t = m * 10.0 ** e
                if lo <= t <= hi:
                    ticks.append(t)
        if len(ticks) >= 3:
            break
    return ticks


def fmt(v):
    return f"{v:g}"


def panel(x0, y0, width, height, title, curves, first_step, summary):
    """One panel's SVG elements: axes, ticks, the curves (name -> values) and a legend."""
    left, right, top, bottom = 62, 12, 30, 62
    pw, ph = width - left - right, height - top - bottom
    steps = max(len(v) for v in curves.values())
    lo = min(min(v) for v in curves.values())
    hi = max(max(v) for v in curves.values())
    lo, hi = math.log10(lo) - 0.02, math.log10(hi) + 0.02

    def sx(i):
        return x0 + left + pw * i / max(1, steps - 1)

    def sy(v):
        return y0 + top + ph * (hi - math.log10(v)) / (hi - lo)

    out = [f'<text x="{x0 + left + pw / 2:.1f}" y="{y0 + 18}" text-anchor="middle" '
           f'font-weight="bold">{title}</text>',
           f'<rect x="{x0 + left}" y="{y0 + top}" width="{pw}" height="{ph}" fill="none" '
           f'stroke="#444"/>']
    for t in nice_ticks(10 ** lo, 10 ** hi):
        y = sy(t)
        out.append(f'<line x1="{x0 + left}" y1="{y:.1f}" x2="{x0 + left + pw}" y2="{y:.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{x0 + left - 5}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    step_tick = 10 ** math.floor(math.log10(max(1, steps)))
    if steps / step_tick < 4:
        step_tick //= 2 if step_tick >= 2 else 1
    for s in range(0, steps + 1, max(1, step_tick)):
        x = sx(min(s, steps - 1))
        out.append(f'<line x1="{x:.1f}" y1="{y0 + top + ph}" x2="{x:.1f}" '
                   f'y2="{y0 + top + ph + 4}" stroke="#444"/>')
        out.append(f'<text x="{x:.1f}" y="{y0 + top + ph + 17}" text-anchor="middle">'
                   f'{s + first_step}</text>')
    out.append(f'<text x="{x0 + left + pw / 2:.1f}" y="{y0 + top + ph + 33}" '
               f'text-anchor="middle">step</text>')
    out.append(f'<text transform="translate({x0 + 15},{y0 + top + ph / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">loss (log scale)</text>')
    for k, (name, values) in enumerate(curves.items()):
        colour = COLOURS[k % len(COLOURS)]
        points = " ".join(f"{sx(i):.1f},{sy(v):.2f}" for i, v in enumerate(values))
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                   f'stroke-width="1.4" opacity="0.85"/>')
        lx, ly = x0 + left + pw - 215, y0 + top + 18 + 18 * k
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 22}" y2="{ly - 4}" '
                   f'stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 28}" y="{ly}">{name}</text>')
    out.append(f'<text x="{x0 + left + pw / 2:.1f}" y="{y0 + top + ph + 52}" '
               f'text-anchor="middle">{summary}</text>')
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="where the runs' --json reports are")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "moment-quality.svg"))
    parser.add_argument("--last", type=int, default=50, help="steps in the final mean")
    parser.add_argument("--smooth", type=int, default=50, help="moving-mean window of the plot")
    parser.add_argument("--variants", nargs="+", default=["32-bit=fp32 moments", "8-bit=8-bit moments"],
                        help="NAME=LABEL of each run to compare, the baseline first")
    parser.add_argument("--title", default="fp32 against 8-bit Adam moments")
    args = parser.parse_args()
    variants = [v.split("=", 1) if "=" in v else (v, v) for v in args.variants]
    if len(variants) < 2:
        sys.exit("--variants: name a baseline and at least one run to compare with it")

    width, height = 520, 380
    elements = []
    for k, (demo, prefix) in enumerate(DEMOS):
        base_name, base_label = variants[0]
        differences = {name: [] for name, _ in variants[1:]}
        base_means, plotted = [], None
        for seed in args.seeds:
            runs = {name: losses(os.path.join(args.dir, f"{prefix}_{name}_s{seed}.json"))
                    for name, _ in variants}
            first, base = runs[base_name]
            for name, (first_v, values) in runs.items():
                if (first, len(base)) != (first_v, len(values)):
                    sys.exit(f"{demo}, seed {seed}: {name} differs from {base_name} in its steps "
                             f"({first_v}+{len(values)} against {first}+{len(base)})")
            a = last_mean(base, args.last)
            base_means.append(a)
            line = [f"{base_label} {a:.6f}"]
            for name, label in variants[1:]:
                b = last_mean(runs[name][1], args.last)
                differences[name].append((b - a) / a)
                line.append(f"{label} {b:.6f} ({differences[name][-1]:+.4%})")
            print(f"{demo}, seed {seed}: {len(base)} steps; mean loss of the last {args.last}: "
                  + ", ".join(line))
            if plotted is None:
                plotted = (seed, first, {label: runs[name][1] for name, label in variants})
        spread = (max(base_means) - min(base_means)) / min(base_means)
        means = {name: sum(d) / len(d) for name, d in differences.items()}
        for name, label in variants[1:]:
            print(f"{demo}: {label}: mean relative difference over seeds {args.seeds}: "
                  f"{means[name]:+.4%}")
        print(f"{demo}: the {base_label} runs' last-{args.last} means spread by {spread:.2%} over "
              f"the seeds")
        seed, first, curves_raw = plotted
        summary = (f"seed {seed} plotted; mean over {len(args.seeds)} seeds, last {args.last} steps: "
                   + ", ".join(f"{means[name]:+.2%}" for name, _ in variants[1:]))
        curves = {label: moving_mean(values, args.smooth) for label, values in curves_raw.items()}
        elements += panel(k * width, 0, width, height,
                          f"{demo}: {args.title} (moving mean of {args.smooth})", curves, first,
                          summary)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(DEMOS)}" '
           f'height="{height}" viewBox="0 0 {width * len(DEMOS)} {height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width * len(DEMOS)}" height="{height}" fill="white"/>',
           *elements, "</svg>"]
    with open(args.out, "w") as f:
        f.write("\n".join(svg) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
