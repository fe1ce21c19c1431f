#!/usr/bin/python3
"""The NVMe tier's step time against max(in-memory step time, swapped bytes / disk bandwidth).

    /usr/bin/python3 bench/offload/engine_step.py \\
        --train-mlp build/release/examples/train_mlp/train_mlp --dir /tmp --rounds 3

The requirement it checks: with the optimizer states (stage 3: and the parameter shards) on NVMe,
a step takes at most --limit (1.15) x max(the same step with every state in memory, the step's
swapped bytes / the disk's bandwidth), i.e. the I/O and the update overlap instead of adding up.
For each stage (1: optimizer states on NVMe; 3: --nvme-params as well), each round runs, on one
model (--layers, fp32 Adam, --ranks ranks), back to back:
  - train_mlp with every state in memory (--no-reference-pass);
  - train_mlp with --nvme DIR --sub-group-size S, the pipelined step (pipeline_read/write on),
    for every S of --sub-group-sizes;
  - the same through a DeepSpeed config with pipeline_read/write false (the serial step: read,
    update, write, one sub-group after the other), at the first S; --no-serial leaves it out;
  - fio on the same file system before and after every NVMe run (one fio between two NVMe
    runs serves both): sequential O_DIRECT write, then read, of a file the size of the swap files
    (ioengine=io_uring, bs 1M, iodepth 8: the tier's aio defaults).
The rounds alternate the order of the runs: the virtual disk's speed drifts from minute to minute
(by up to 2x), so each NVMe run is held against the fio runs next to it in time. Each train_mlp
run drops its first --warmup steps and takes the median of the rest; the table gives medians over
the rounds, and each ratio is the median of the per-round ratios NVMe run / max(in-memory run of
the same round, I/O bound). The I/O bound is ranks x (bytes read / fio's read bandwidth + bytes
written / fio's write bandwidth), the mean over the fio runs before and after: one disk serves
both directions and every rank.

Two ratios per case:
  - step(): `step_after_reduction_seconds` (the optimizer step once the gradients are reduced),
    against the bytes step() itself moves: the master weights and moments read and written, plus
    at stage 3 with --nvme-params the new parameter shards written;
  - whole step: `step_seconds` (forward, backward and step(), slowest rank), against every byte the
    step moved (stage 3 with --nvme-params also reads the parameter shards in forward and
    backward). Forward and backward do not overlap the optimizer's I/O, so this one exceeds the
    bound by their time wherever the I/O dominates.
Exits 1 if a pipelined case's ratio (--check: step, whole or both) is above --limit. A timing,
so not a pass/fail test for CI. Needs fio (Debian: fio) and a train_mlp built with zero::nvme.
"""

import argparse
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tests" / "offload"))
from compare_fio import file_system, fio, human, machine, parse_bytes  # noqa: E402
from train_mlp_driver import ScratchDir, TrainMlp, read_json, swap_files  # noqa: E402

MB = 1e6
MiB = 1 << 20


def median_after(values, warmup):
    kept = values[warmup:]
    if not kept:
        sys.exit(f"engine_step.py: no steps left after dropping {warmup}: raise --steps")
    return statistics.median(kept)


class Bench:
    def __init__(self, args, scratch):
        self.args, self.scratch = args, scratch
        self.train_mlp = TrainMlp(args.train_mlp, timeout_s=args.timeout)
        self.swap = scratch / "swap"
        self.swap.mkdir()
        self.runs = 0

    def flags(self, stage):
        a = self.args
        return ["--stage", stage, "--steps", a.steps, "--layers", a.layers, "--batch", a.batch,
                "--data-rows", a.batch, "--optimizer", "adam", "--bucket", a.bucket,
                "--print-every", a.steps, "--no-reference-pass"]

    def serial_config(self, stage, sub_group):
        """A DeepSpeed config with the same settings as the flags, pipeline_read/write off."""
        a = self.args
        zero = {"stage": stage, "reduce_bucket_size": a.bucket, "sub_group_size": sub_group,
                "stage3_param_persistence_threshold": 0,
                "offload_optimizer": {"device": "nvme", "nvme_path": str(self.swap),
                                      "pipeline_read": False, "pipeline_write": False}}
        if stage == 3:
            zero["offload_param"] = {"device": "nvme", "nvme_path": str(self.swap),
                                     "max_in_cpu": 0}
        config = {"train_batch_size": a.batch, "zero_optimization": zero,
                  "aio": {"block_size": MiB, "queue_depth": 8}}
        path = self.scratch / f"serial_stage{stage}.json"
        path.write_text(json.dumps(config, indent=2))
        return path

    def train(self, stage, where, sub_group=None):
        """One train_mlp run: per-step medians after the warmup, and the bytes on disk."""
        self.runs += 1
        json_path = self.scratch / f"run{self.runs}.json"
        flags = self.flags(stage) + ["--json", json_path]
        if where == "pipelined":
            flags += ["--nvme", self.swap, "--sub-group-size", sub_group]
        elif where == "serial":
            flags += ["--config", self.serial_config(stage, sub_group), "--nvme", self.swap,
                      "--sub-group-size", sub_group]
        if where != "memory" and stage == 3:
            flags.append("--nvme-params")
        result = self.train_mlp.run(flags, ranks=self.args.ranks)
        left = swap_files(self.swap)
        shutil.rmtree(self.swap / "zero_swap", ignore_errors=True)  # after a failure
        if result.returncode != 0 or result.timed_out:
            sys.exit(f"engine_step.py: train_mlp failed ({where}, stage {stage}):\n"
                     f"{result.describe()}")
        if "does not support O_DIRECT" in result.stderr:
            sys.exit(f"engine_step.py: {self.args.dir} refuses O_DIRECT, so the tier fell back to "
                     "buffered I/O and fio's direct bandwidth says nothing about it: use a "
                     "directory on a disk (--dir)")
        if left:
            print(f"warning: train_mlp left swap files behind: {', '.join(left[:5])}",
                  file=sys.stderr)
        data = read_json(json_path)
        steps = data.get("steps") or data["communication_per_step"]
        w = self.args.warmup
        mem = data["memory"][0]
        # What step() itself moves: the master weights and moments in and out, and at stage 3
        # with the parameters on NVMe the new parameter shards out.
        optimizer_file = mem["master_weights"] + mem["optimizer_states"]
        params_file = mem["parameters"] if stage == 3 else 0
        return {
            "whole": median_after(data["step_seconds"], w),
            "step": median_after([s["step_after_reduction_seconds"] for s in steps], w),
            "update": median_after([s["step_update_seconds"] for s in steps], w),
            "read": median_after([s["nvme_bytes_read"] for s in steps], w),
            "written": median_after([s["nvme_bytes_written"] for s in steps], w),
            "step_read": optimizer_file if where != "memory" else 0,
            "step_written": optimizer_file + params_file if where != "memory" else 0,
            "files": optimizer_file + params_file,
        }

    def disk(self, nbytes):
        """fio's sequential O_DIRECT write then read of a file of `nbytes`, GB/s."""
        size = max(MiB, -(-int(nbytes) // MiB) * MiB)
        path = os.path.join(self.args.dir, f"zero_engine_step_fio.{os.getpid()}")
        try:
            return {d: fio(path, d, "1M", 8, size) for d in ("write", "read")}
        except subprocess.CalledProcessError as e:
            sys.exit(f"engine_step.py: fio failed in {self.args.dir}: {e.stderr.strip()[-800:]}")
        finally:
            if os.path.exists(path):
                os.remove(path)


def io_bound(ranks, read, written, disks):
    """Seconds to move the bytes at the bandwidths measured just before and just after the run
    (the mean of the two)."""
    return statistics.mean(ranks * (read / (d["read"] * 1e9) + written / (d["write"] * 1e9))
                           for d in disks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-mlp", default="build/release/examples/train_mlp/train_mlp")
    parser.add_argument("--dir", default="/tmp", help="where the swap files and fio's file go")
    parser.add_argument("--layers", default="32,4096,4096,4096,4096,8")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bucket", type=int, default=1 << 22, help="reduction bucket, elements")
    parser.add_argument("--stages", default="1,3", help="1, 2: optimizer states on NVMe; 3: "
                        "parameter shards too (--nvme-params)")
    parser.add_argument("--sub-group-sizes", default="4M",
                        help="elements per sub-group, e.g. 1M,4M,16M (the first also for the "
                        "serial case)")
    parser.add_argument("--no-serial", action="store_true", help="leave out the serial step")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2, help="first steps dropped")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--limit", type=float, default=1.15)
    parser.add_argument("--check", choices=["step", "whole", "both"], default="step",
                        help="which ratio must stay within --limit (default: step())")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per train_mlp run")
    args = parser.parse_args()

    if not os.access(args.train_mlp, os.X_OK):
        sys.exit(f"engine_step.py: no train_mlp at {args.train_mlp} (--train-mlp)")
    if not os.path.isdir(args.dir):
        sys.exit(f"engine_step.py: --dir {args.dir} is not a directory")
    try:
        fio_version = subprocess.run(["fio", "--version"], capture_output=True,
                                     text=True).stdout.strip()
    except FileNotFoundError:
        sys.exit("engine_step.py: needs fio (Debian: apt-get install fio)")
    stages = [int(s) for s in args.stages.split(",")]
    if any(s not in (1, 2, 3) for s in stages):
        sys.exit("engine_step.py: --stages takes 1, 2 and 3 (stage 0 shards nothing)")
    labels = {parse_bytes(s): s.strip() for s in args.sub_group_sizes.split(",")}
    sub_groups = list(labels)
    cases = [("pipelined", s) for s in sub_groups]
    if not args.no_serial:
        cases.append(("serial", sub_groups[0]))

    # results[stage][name]: one record per round; name: "memory" or a case. fios[stage]: every fio.
    results = {s: {} for s in stages}
    fios = {s: [] for s in stages}
    files = {}  # stage -> bytes of the swap files (from the in-memory run): fio's file size
    with ScratchDir(args.dir, prefix="zero_engine_step.") as scratch:
        bench = Bench(args, scratch)
        for r in range(args.rounds):
            for stage in stages:
                order = ["memory"] + cases
                if r % 2 == 1:
                    order.reverse()
                after = None  # fio runs between NVMe runs, which share them
                for name in order:
                    if name == "memory":
                        record = bench.train(stage, "memory")
                        files.setdefault(stage, record["files"])
                    else:
                        if after is None:
                            fios[stage].append(bench.disk(files[stage]))
                        before = fios[stage][-1]
                        record = bench.train(stage, *name)
                        after = bench.disk(files[stage])
                        fios[stage].append(after)
                        record["disks"] = (before, after)
                    results[stage].setdefault(name, []).append(record)
                last = {name: runs[-1] for name, runs in results[stage].items()}
                print(f"round {r} stage {stage}: in memory step() {last['memory']['step']:.3f} s; "
                      + "; ".join(f"{c[0]} {labels[c[1]]}: step() {last[c]['step']:.3f} s, fio "
                                  + ", ".join(f"{d['write']:.2f} W {d['read']:.2f} R"
                                              for d in last[c]["disks"]) + " GB/s"
                                  for c in cases), file=sys.stderr, flush=True)

    command = " ".join(["python3", "bench/offload/engine_step.py"] +
                       [shlex.quote(a) for a in sys.argv[1:]])
    print(f"`{command}`, {datetime.date.today().isoformat()}; {machine()}; {args.dir} on "
          f"{file_system(args.dir)}; {fio_version}; model --layers {args.layers}, fp32 Adam, "
          f"{args.ranks} rank(s), batch {args.batch}; {args.steps} steps per run, first "
          f"{args.warmup} dropped; medians of {args.rounds} alternating rounds.\n")
    print("| stage | step | sub-group (elements) | MB read / written per step (step() alone) "
          "| step() s: in memory / NVMe / I/O bound | step() ratio "
          "| whole step s: in memory / NVMe / I/O bound | whole-step ratio |")
    print("|---|---|---|---|---|---|---|---|")
    failures, notes = [], []
    med = statistics.median
    for stage in stages:
        res = results[stage]
        memory = res["memory"]
        for case in cases:
            runs = res[case]
            cells = {}
            for kind, read_key, written_key in (("step", "step_read", "step_written"),
                                                ("whole", "read", "written")):
                bounds = [io_bound(args.ranks, n[read_key], n[written_key], n["disks"])
                          for n in runs]
                ratios = [n[kind] / max(m[kind], b) for n, m, b in zip(runs, memory, bounds)]
                cells[kind] = (med(m[kind] for m in memory), med(n[kind] for n in runs),
                               med(bounds), med(ratios))
                if case[0] == "pipelined" and args.check in (kind, "both") and \
                        med(ratios) > args.limit:
                    failures.append(f"stage {stage}, sub-group {labels[case[1]]}: {kind} ratio "
                                    f"{med(ratios):.2f} > {args.limit}")
            mb = lambda key: med(n[key] for n in runs) / MB  # noqa: E731
            print(f"| {stage}{' + params' if stage == 3 else ''} | {case[0]} | {labels[case[1]]} "
                  f"| {mb('read'):.0f} / {mb('written'):.0f} "
                  f"({mb('step_read'):.0f} / {mb('step_written'):.0f}) "
                  f"| {cells['step'][0]:.3f} / {cells['step'][1]:.3f} / {cells['step'][2]:.3f} "
                  f"| {cells['step'][3]:.2f} "
                  f"| {cells['whole'][0]:.3f} / {cells['whole'][1]:.3f} / {cells['whole'][2]:.3f} "
                  f"| {cells['whole'][3]:.2f} |")
        fio_file = human(-(-int(files[stage]) // MiB) * MiB)
        notes.append(f"stage {stage}: fio on a {fio_file} file ({len(fios[stage])} runs), write "
                     f"{med(d['write'] for d in fios[stage]):.2f} GB/s "
                     f"({min(d['write'] for d in fios[stage]):.2f}-"
                     f"{max(d['write'] for d in fios[stage]):.2f}), read "
                     f"{med(d['read'] for d in fios[stage]):.2f} GB/s "
                     f"({min(d['read'] for d in fios[stage]):.2f}-"
                     f"{max(d['read'] for d in fios[stage]):.2f}); step_update (the sub-group "
                     "loop, waits for the disk included): " +
                     ", ".join(f"{c[0]} {labels[c[1]]} {med(n['update'] for n in res[c]):.3f} s"
                               for c in cases))
    print("\n" + "\n".join(notes))
    if failures:
        print(f"\nFAIL: NVMe step above {args.limit} x max(in-memory step, I/O bound): " +
              "; ".join(failures))
        sys.exit(1)
    print(f"\nOK: every pipelined case's {args.check} ratio is within {args.limit}")


if __name__ == "__main__":
    main()
