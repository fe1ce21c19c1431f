#!/usr/bin/python3
"""With the NVMe tier, the optimizer states' resident memory stays at the bounce-buffer budget
whatever the model's size: measured, from the peak resident set (getrusage) of train_mlp runs.

Two MLPs whose parameter counts differ by about 4x (more layers of one width, so that every
per-layer buffer keeps its size) train for a few steps at 1 rank, fp32 Adam, once with every state
in memory and once with the states on NVMe (stage 3: the parameters too, --nvme-params). Between
the two sizes (11.8M parameters more, so 1 byte per parameter is 11.8 MB):

  * the peak RSS of the in-memory runs grows by at least what the NVMe runs keep on disk (12 bytes
    per parameter for Adam's master weights and moments; 16 with stage 3's parameters) more than
    the peak RSS of the NVMe runs does;
  * each run's peak RSS grows by what the engine reports it keeps in memory (model states and
    buffers), and by nothing else: train_mlp draws the initial weights one layer at a time, its
    data set depends on the widths only, and the activations it keeps per layer (2 x 8 rows x
    1400 x 4 bytes = 90 KB) add 0.5 MB over the 6 extra layers;
  * the resident bytes of the states placed on NVMe (peak RSS of the NVMe run - peak RSS of the
    in-memory run + the bytes the in-memory run keeps of those states) are the same at both sizes
    and no more than the tier's buffers: the bounce budget, not the model.

Each comparison allows --tolerance-mb (4 MB, a third of a byte per added parameter: allocator and
page granularity, and the peak landing in another phase of the step); anything on the NVMe path
that grows with the model by a byte per parameter or more fails. An NVMe run's peak RSS is now and
then a few MB above its usual value (at stage 3, +6 MB in about 1 run of 10 on the build machine),
which is noise, not growth. Noise only ever adds to a peak, in memory as on NVMe, so each
configuration runs --repeats times (5: with 3, a stage 1 case still failed once in a whole test
run on the loaded 2-core build machine, and passed alone) and its lowest peak counts. train_mlp runs with
--no-reference-pass (its timing of the fused pass alone would allocate 20 bytes per parameter
again) and without --save-npy (so it does not gather the final weights).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_mlp_driver import (ScratchDir, TrainMlp, add_arguments, fail, read_json,  # noqa: E402
                              swap_files)

MB = 1e6
WIDTH = 1400
BATCH = 8  # small, so that the activations, which grow with the depth, stay negligible


def widths(hidden_layers):
    return ",".join(map(str, [32] + [WIDTH] * hidden_layers + [8]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--stage", type=int, choices=[1, 2, 3], default=1)
    parser.add_argument("--nvme-params", action="store_true", help="stage 3: parameters on NVMe")
    parser.add_argument("--swap-base", default=None, help="where the swap directories go (/tmp)")
    parser.add_argument("--sub-group-size", type=int, default=1 << 20)
    parser.add_argument("--tolerance-mb", type=float, default=4.0,
                        help="allowed difference between measured and expected growth")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each configuration; the lowest peak RSS counts")
    args = parser.parse_args()
    tolerance = args.tolerance_mb * MB

    train_mlp = TrainMlp(args.train_mlp, args.mpirun, timeout_s=120)
    sizes = {"small": 3, "large": 9}  # hidden layers: 3.98M and 15.74M parameters
    runs = {}
    with ScratchDir(args.swap_base) as scratch:
        for size, hidden in sizes.items():
            for where in ("memory", "nvme"):
                json_path = scratch / f"{size}-{where}.json"
                flags = ["--stage", args.stage, "--steps", 3, "--layers", widths(hidden),
                         "--batch", BATCH, "--data-rows", 64, "--optimizer", "adam",
                         "--no-reference-pass", "--print-every", 3, "--json", json_path]
                if where == "nvme":
                    swap = scratch / f"swap-{size}"
                    swap.mkdir()
                    flags += ["--nvme", swap, "--sub-group-size", args.sub_group_size]
                    if args.nvme_params:
                        flags.append("--nvme-params")
                peaks = []
                for _ in range(args.repeats):
                    result = train_mlp.run(flags)
                    if result.returncode != 0 or result.timed_out:
                        fail("train_mlp did not complete:\n" + result.describe())
                    if where == "nvme" and swap_files(swap):
                        fail(f"swap files remain after a normal run: {swap_files(swap)}")
                    report = read_json(json_path)
                    peaks.append(report["memory"][0]["peak_rss"])
                runs[size, where] = dict(report["memory"][0], psi=report["psi"],
                                         seconds=result.seconds, peak_rss=min(peaks),
                                         peak_spread=max(peaks) - min(peaks))

    def growth(where, key):
        return runs["large", where][key] - runs["small", where][key]

    # The states the NVMe runs keep off memory, as the in-memory runs hold them.
    def states_off_memory(size):
        m = runs[size, "memory"]
        return m["master_weights"] + m["optimizer_states"] + (
            m["parameters"] if args.nvme_params else 0)

    psi_growth = growth("memory", "psi")
    off_memory_growth = states_off_memory("large") - states_off_memory("small")
    saved = growth("memory", "peak_rss") - growth("nvme", "peak_rss")

    print(f"stage {args.stage}{' with --nvme-params' if args.nvme_params else ''}, 1 rank, fp32 "
          f"Adam, sub-group {args.sub_group_size} elements; sizes in MB (1e6 bytes)")
    print(f"{'run':<14}{'psi':>12}{'peak RSS':>11}{'(spread)':>9}{'in memory':>11}{'buffers':>10}"
          f"{'on NVMe':>10}{'seconds':>9}")
    for (size, where), r in runs.items():
        print(f"{size + ' ' + where:<14}{r['psi']:>12}{r['peak_rss'] / MB:>11.1f}"
              f"{r['peak_spread'] / MB:>9.1f}{r['in_memory'] / MB:>11.1f}{r['buffers'] / MB:>10.1f}"
              f"{r['on_nvme'] / MB:>10.1f}{r['seconds']:>9.1f}")
    print(f"parameters grow by {psi_growth} "
          f"({runs['large', 'memory']['psi'] / runs['small', 'memory']['psi']:.2f}x); "
          f"the states kept on NVMe by {off_memory_growth / MB:.1f} MB "
          f"({off_memory_growth / psi_growth:.1f} bytes per parameter); tolerance "
          f"{tolerance / MB:.1f} MB ({tolerance / psi_growth:.2f} bytes per added parameter)")

    problems = []
    print(f"peak RSS growth: in memory {growth('memory', 'peak_rss') / MB:.1f} MB, with NVMe "
          f"{growth('nvme', 'peak_rss') / MB:.1f} MB: NVMe saves {saved / MB:.1f} MB of growth "
          f"(expected at least {off_memory_growth / MB:.1f} - {tolerance / MB:.1f})")
    if saved < off_memory_growth - tolerance:
        problems.append(f"the NVMe runs' peak RSS grows by {(off_memory_growth - saved) / MB:.1f} "
                        f"MB more than what they keep in memory "
                        f"({(off_memory_growth - saved) / psi_growth:.2f} bytes per parameter)")

    for where in ("memory", "nvme"):
        expected = growth(where, "in_memory")
        measured = growth(where, "peak_rss")
        print(f"{where}: peak RSS grows by {measured / MB:.1f} MB; the engine's in-memory bytes "
              f"by {expected / MB:.1f} MB")
        if abs(measured - expected) > tolerance:
            problems.append(f"{where}: the peak RSS grows by {measured / MB:.1f} MB, the bytes the "
                            f"engine reports in memory by {expected / MB:.1f} MB")

    resident = {}
    for size in sizes:
        m, n = runs[size, "memory"], runs[size, "nvme"]
        resident[size] = n["peak_rss"] - m["peak_rss"] + states_off_memory(size)
        tier_buffers = n["buffers"] - m["buffers"]
        print(f"{size}: resident bytes of the states on NVMe {resident[size] / MB:.1f} MB "
              f"(measured); the tier's buffers {tier_buffers / MB:.1f} MB (reported)")
        if resident[size] > tier_buffers + tolerance:
            problems.append(f"{size}: the states on NVMe take {resident[size] / MB:.1f} MB of "
                            f"memory, more than the tier's buffers ({tier_buffers / MB:.1f} MB)")
    change = resident["large"] - resident["small"]
    if abs(change) > tolerance:
        problems.append(f"the resident bytes of the states on NVMe change by {change / MB:.1f} MB "
                        f"with the model's size ({change / psi_growth:.2f} bytes per parameter)")

    if problems:
        fail("; ".join(problems))
    print("PASS: resident optimizer-state bytes stay at the bounce-buffer budget")


if __name__ == "__main__":
    main()
