#!/usr/bin/python3
"""Checkpoint save and load against the disk, and against torch.save / torch.load.

    /usr/bin/python3 bench/checkpoint/checkpoint_bench.py \\
        --train-mlp build/release/examples/train_mlp/train_mlp --dir /tmp --rounds 3

A model of --layers (default 1024,8192,8192,4096: 109M parameters, fp32 Adam, so 1.31 GB of master
weights and moments) on --ranks (2) ranks at stage 2. Each round, back to back:
  - zero save: train_mlp trains one step and saves (every rank writes its shard, fsync'ed);
    the time train_mlp prints for save_checkpoint;
  - fio write: --ranks jobs writing files of the same sizes sequentially with O_DIRECT in 2 MiB
    requests, as the save writes (the ratio's base); and buffered with an fsync at the end (shown);
  - zero load: the page cache dropped, train_mlp loads the checkpoint (read, checksum, the compute
    copy rebuilt: the whole of load_checkpoint);
  - fio read: --ranks jobs reading the checkpoint's own state files with O_DIRECT, 2 MiB
    requests, as the load reads;
  - torch.save / torch.load: --ranks processes, each saving the same tensors as its rank's shard
    (master weights and both moments per parameter, fp32) with torch.save into a file and
    fsync, then, the page cache dropped, torch.load of it;
  - asynchronous save: train_mlp saving after each of 3 steps with --async-checkpoint; the time
    the training loop was blocked (the snapshot copy), at the first save and at the third
    (train_mlp reserves the snapshot's memory before training: on these virtual machines fresh
    memory costs ten times the copy).
The rounds alternate the order (the virtual disk's speed drifts); the table gives medians, and each
ratio is the median of per-round ratios. Without root (no drop_caches) loads are read from the page
cache and the script says so. A timing, not a pass/fail test.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def drop_caches():
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def train_mlp(a, args):
    command = [a.mpirun, "-np", str(a.ranks), "--oversubscribe", a.train_mlp, "--layers", a.layers,
               "--batch", "8", "--data-rows", "16", "--stage", "2", "--no-reference-pass",
               "--print-every", "100"] + [str(x) for x in args]
    r = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, **MPI_ENV),
                       timeout=900)
    if r.returncode != 0:
        sys.exit(f"train_mlp failed: {' '.join(command)}\n{r.stdout}{r.stderr}")
    return r.stdout


def seconds_after(pattern, text):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"no match for {pattern!r} in:\n{text}")
    return float(m.group(1))


def fio(a, name, rw, files, direct):
    """Aggregate MB/s of one job per file, all at once (requests of 2 MiB, as zero's)."""
    command = ["fio", "--output-format=json", "--group_reporting", "--ioengine=psync", "--bs=2M",
               f"--direct={int(direct)}"]
    if rw == "write":
        command += ["--end_fsync=1"]
    for i, (path, size) in enumerate(files):
        command += [f"--name={name}{i}", f"--filename={path}", f"--rw={rw}", f"--size={size}"]
    r = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"fio failed: {r.stdout}{r.stderr}")
    job = json.loads(r.stdout)["jobs"][0]
    return (job["write"] if rw == "write" else job["read"])["bw_bytes"] / 1e6


TORCH_SAVE = r"""
import os, sys, time, torch
path, numel, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
if mode == "save":
    torch.manual_seed(0)
    state = {"master": torch.rand(numel), "exp_avg": torch.rand(numel), "exp_avg_sq": torch.rand(numel)}
    start = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    print(time.perf_counter() - start)
else:
    start = time.perf_counter()
    state = torch.load(path)
    print(time.perf_counter() - start)
"""


def torch_round(a, scratch, numels, mode):
    procs = [subprocess.Popen([a.python, "-c", TORCH_SAVE, str(scratch / f"torch{r}.pt"), str(n), mode],
                              stdout=subprocess.PIPE, text=True) for r, n in enumerate(numels)]
    start = time.perf_counter()
    times = [float(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - start
    return max(times), wall


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mlp", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--python", default="/usr/bin/python3", help="with torch")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--layers", default="1024,8192,8192,4096")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    a = parser.parse_args()
    rows = {k: [] for k in ("save", "fio_write", "fio_write_buffered", "load", "fio_read", "torch_save", "torch_load",
                            "async_blocked", "async_first", "save_ratio", "load_ratio", "torch_save_x",
                            "torch_load_x")}
    cold = True
    for round_ in range(a.rounds):
        scratch = Path(tempfile.mkdtemp(prefix="zero_checkpoint_bench.", dir=a.dir))
        try:
            ckpt = scratch / "ckpt"
            out = train_mlp(a, ["--steps", 1, "--save-checkpoint", ckpt])
            save = seconds_after(r"checkpoint step1 saved to \S+ in ([0-9.]+) s", out)
            files = sorted((ckpt / "step1").glob("states.rank*.bin"))
            sizes = [f.stat().st_size for f in files]
            total = sum(sizes)
            targets = [(scratch / f"fio{r}", s) for r, s in enumerate(sizes)]
            write_bw = fio(a, "wd", "write", targets, True)
            buffered_write_bw = fio(a, "w", "write", targets, False)
            for t, _ in targets:
                t.unlink()
            cold = drop_caches() and cold
            out = train_mlp(a, ["--steps", 1, "--load-checkpoint", ckpt])
            load = seconds_after(r"resumed from \S+ in ([0-9.]+) s", out)
            cold = drop_caches() and cold
            read_bw = fio(a, "r", "read", [(f, s) for f, s in zip(files, sizes)], True)
            numels = [s // 4 // 3 for s in sizes]
            torch_save, _ = torch_round(a, scratch, numels, "save")
            cold = drop_caches() and cold
            torch_load, _ = torch_round(a, scratch, numels, "load")
            out = train_mlp(a, ["--steps", 3, "--save-every", 1, "--save-checkpoint",
                                scratch / "async", "--async-checkpoint"])
            snapshots = [float(x) for x in re.findall(
                r"checkpoint step\d+ snapshot taken for \S+ in ([0-9.]+) s", out)]
            first_blocked, blocked = snapshots[0], snapshots[-1]
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        save_bw, load_bw = total / save / 1e6, total / load / 1e6
        for k, v in (("save", save_bw), ("fio_write", write_bw), ("fio_write_buffered",
                                                                  buffered_write_bw),
                     ("load", load_bw),
                     ("fio_read", read_bw), ("torch_save", total / torch_save / 1e6),
                     ("torch_load", total / torch_load / 1e6), ("async_blocked", blocked),
                     ("async_first", first_blocked),
                     ("save_ratio", save_bw / write_bw), ("load_ratio", load_bw / read_bw),
                     ("torch_save_x", torch_save / save), ("torch_load_x", torch_load / load)):
            rows[k].append(v)
        print(f"round {round_ + 1}: {total / 1e9:.2f} GB; save {save:.2f} s ({save_bw:.0f} MB/s, "
              f"fio {write_bw:.0f}), load {load:.2f} s ({load_bw:.0f} MB/s, fio {read_bw:.0f}), "
              f"torch.save {torch_save:.2f} s, torch.load {torch_load:.2f} s, async blocked "
              f"{first_blocked:.3f} s (first save), {blocked:.3f} s (third)", flush=True)
    m = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nmedians over {a.rounds} round(s), {a.ranks} ranks, layers {a.layers}"
          f"{'' if cold else ' (page cache NOT dropped: loads are from memory)'}")
    print("| | MB/s | against |")
    print("|---|---|---|")
    print(f"| zero save | {m['save']:.0f} | {m['save_ratio']:.2f} x fio sequential O_DIRECT write "
          f"({m['fio_write']:.0f} MB/s; buffered with fsync: {m['fio_write_buffered']:.0f}) |")
    print(f"| zero load | {m['load']:.0f} | {m['load_ratio']:.2f} x fio sequential O_DIRECT read "
          f"of the state files ({m['fio_read']:.0f} MB/s) |")
    print(f"| torch.save | {m['torch_save']:.0f} | zero is {m['torch_save_x']:.2f}x faster |")
    print(f"| torch.load | {m['torch_load']:.0f} | zero is {m['torch_load_x']:.2f}x faster |")
    per_rank = total / a.ranks
    print(f"| async save: training blocked, third save | {m['async_blocked']:.3f} s | "
          f"{per_rank / m['async_blocked'] / 1e6:.0f} MB/s copied per rank; a synchronous save "
          f"blocks {total / m['save'] / 1e6:.2f} s |")
    print(f"| async save: training blocked, first save | {m['async_first']:.3f} s | "
          f"the snapshot reserved at the start (reserve_checkpoint_snapshot) |")


if __name__ == "__main__":
    main()
