#!/usr/bin/python3
"""The NVMe tier's faults as a training run meets them: train_mlp with its states on NVMe, at 1 or
more ranks, against a broken nvme_path, a full or read-only disk, the swap files of a killed run,
and after a normal run. Each fault must end the run quickly (within the driver's limit, before the
communicator's watchdog has to abort a rank left waiting) with the library's message, naming the
path and what is wrong; a run that ends must leave nothing behind.

    engine_faults_test.py --train-mlp build/dev/examples/train_mlp/train_mlp --ranks 2 \\
        --case stale_swap

Cases (--case, default: every case that makes sense at --ranks):
  missing_path, path_is_file    nvme_path does not exist, or is a file
  read_only                     nvme_path on a read-only tmpfs
  disk_full                     a 4 MB tmpfs for swap files of 6.4 MB per rank
  disk_full_partway             (1 rank) the first swap file fits, the second does not: the
                                message names the second, and the first is removed
  stale_swap                    a SIGKILLed run's files refuse the next run (naming the directory
                                and remove_stale); --remove-stale-swap deletes them and trains
  in_use                        (1 rank) a second run on a directory in use is refused, naming
                                the first run's pid
  clean_exit                    a normal run leaves no swap files, lock files or directories
  one_rank_fault                (2+ ranks) only rank 0's directory holds stale files: rank 0's
                                refusal must end the job, not leave rank 1 waiting
  config_paths                  (1 rank) with --config alone, each store's files go under its own
                                section's nvme_path
The cases that mount a tmpfs need root (CAP_SYS_ADMIN) and exit 77 (skipped) without it.
"""

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from train_mlp_driver import (ScratchDir, Tmpfs, TrainMlp, add_arguments, fail,  # noqa: E402
                              kill_group, read_json, skip, swap_files, wait_until)

# Stage 3 with the parameters on NVMe too: both stores (optimizer/ and parameters/) take part.
SMALL = ["--stage", 3, "--nvme-params", "--layers", "32,256,256,8", "--data-rows", 64]
# 3.2M parameters: 6.4 MB of parameter shard per rank at 2 ranks, 12.8 MB at 1.
LARGE = ["--stage", 3, "--nvme-params", "--layers", "32,1024,1024,1024,1024,8", "--data-rows", 64]
# A stuck collective aborts after this; a refusal must end the job well before it.
WATCHDOG_S = 20
WATCHDOG_MESSAGE = "did not complete within"

CASES = {}


def case(min_ranks=1, max_ranks=None):
    def register(function):
        CASES[function.__name__] = (function, min_ranks, max_ranks)
        return function
    return register


class Faults:
    def __init__(self, train_mlp, ranks, scratch):
        self.train_mlp, self.ranks, self.scratch = train_mlp, ranks, scratch

    def run(self, nvme, model=SMALL, steps=3, extra=()):
        flags = list(model) + ["--nvme", nvme, "--steps", steps] + list(extra)
        return self.train_mlp.run(flags, self.ranks, env={"ZERO_TIMEOUT_S": str(WATCHDOG_S)})

    def refused(self, result, *parts):
        """The run failed promptly, on its own (not through the watchdog), saying every part."""
        if result.timed_out:
            fail("the run hung until the driver killed it:\n" + result.describe())
        if result.returncode == 0:
            fail("the run succeeded; expected a refusal:\n" + result.describe())
        if WATCHDOG_MESSAGE in result.output:
            fail("a rank was left waiting in a collective until the watchdog aborted the job: the "
                 "fault did not end the run by itself:\n" + result.describe())
        missing = [p for p in parts if p not in result.output]
        if missing:
            fail(f"the message lacks {missing}:\n" + result.describe())
        print(f"refused as expected ({result.seconds:.1f} s): " + error_line(result))

    def trained(self, result):
        if result.timed_out or result.returncode != 0:
            fail("train_mlp did not complete:\n" + result.describe())

    def kill_while_swapping(self, nvme, ranks=None):
        """Starts a long run and SIGKILLs it once every rank has made its swap files."""
        process = self.start_swapping(nvme, ranks)
        kill_group(process)
        process.communicate()

    def start_swapping(self, nvme, ranks=None):
        """Starts a long run in `nvme` and returns it once every rank made its swap files (4 a
        rank: parameters, master weights and 2 Adam moments)."""
        ranks = ranks or self.ranks
        process = self.train_mlp.start(list(SMALL) + ["--nvme", nvme, "--steps", 100000], ranks)

        def swapping():
            return len([f for f in swap_files(nvme) if f.endswith(".swp")]) >= 4 * ranks
        if not wait_until(lambda: swapping() or process.poll() is not None, 60) or (
                process.poll() is not None):
            kill_group(process)
            stdout, stderr = process.communicate()
            fail(f"the run made no swap files to work with (exit code {process.returncode}, "
                 f"{nvme} holds {swap_files(nvme)}):\n{stdout}{stderr}")
        return process


def error_line(result):
    """The first error train_mlp printed (a rank's "train_mlp: zero: ..." line)."""
    lines = [line for line in result.output.splitlines() if line.startswith("train_mlp: zero: ")]
    return lines[0] if lines else "(no error line from train_mlp)"


@case()
def missing_path(t):
    nvme = t.scratch / "missing"
    t.refused(t.run(nvme), f"nvme_path {nvme} does not exist")


@case()
def path_is_file(t):
    nvme = t.scratch / "a_file"
    nvme.write_text("not a directory\n")
    t.refused(t.run(nvme), f"nvme_path {nvme} is not a directory")


@case()
def read_only(t):
    with Tmpfs("4m", read_only=True) as tmpfs:
        if tmpfs.refused:
            skip(tmpfs.refused)
        t.refused(t.run(tmpfs.path), f"nvme_path {tmpfs.path} is not writable",
                  f"creating {tmpfs.path / 'zero_swap'} failed: Read-only file system")


def no_space(t, result, tmpfs, file_name=None):
    """Checks the disk-full message: the swap file under the tmpfs, the bytes it needs, the bytes
    free, and that the need exceeds what is free; returns the file's path."""
    pattern = (r"no space for swap file (" + re.escape(str(tmpfs.path)) +
               r"/zero_swap/\S+\.swp): it needs (\d+) bytes, the file system has (\d+) free")
    t.refused(result, "no space for swap file")
    found = re.search(pattern, result.output)
    if not found:
        fail(f"no message matches /{pattern}/:\n" + result.describe())
    path, needs, free = found.group(1), int(found.group(2)), int(found.group(3))
    if needs <= free:
        fail(f"the message says {path} needs {needs} bytes but {free} are free")
    if file_name and not path.endswith("/" + file_name):
        fail(f"expected the refusal for {file_name}, got it for {path}")
    left = swap_files(tmpfs.path)
    if left:
        fail(f"the failed run left files on the tmpfs: {left}")
    return path


@case()
def disk_full(t):
    # Every rank's first swap file is larger than the whole tmpfs, so every rank fails alike.
    with Tmpfs("4m") as tmpfs:
        if tmpfs.refused:
            skip(tmpfs.refused)
        no_space(t, t.run(tmpfs.path, model=LARGE), tmpfs)


@case(max_ranks=1)
def disk_full_partway(t):
    # Stage 1, 1.09M parameters: optimizer.master.swp (4.4 MB) fits in 6 MB, exp_avg does not.
    model = ["--stage", 1, "--layers", "32,1024,1024,8", "--data-rows", 64]
    with Tmpfs("6m") as tmpfs:
        if tmpfs.refused:
            skip(tmpfs.refused)
        no_space(t, t.run(tmpfs.path, model=model), tmpfs, "optimizer.exp_avg.swp")


@case()
def stale_swap(t):
    nvme = t.scratch / "swap"
    nvme.mkdir()
    t.kill_while_swapping(nvme)
    stale = [f for f in swap_files(nvme) if f.endswith(".swp")]
    print(f"after SIGKILL, {len(stale)} swap files remain: {stale}")
    result = t.run(nvme)
    t.refused(result, "left by a run that did not exit cleanly", "no longer holds the lock",
              "remove_stale")
    found = re.search(r"swap directory (\S+) holds \d+ file\(s\)", result.output)
    if not found or not found.group(1).startswith(str(nvme / "zero_swap") + "/"):
        fail(f"no refusal naming a swap directory under {nvme / 'zero_swap'}:\n"
             + result.describe())
    if [f for f in swap_files(nvme) if f.endswith(".swp")] != stale:
        fail("the refusing run changed the stale files; it must leave them for a person to judge")
    result = t.run(nvme, extra=["--remove-stale-swap"])
    t.trained(result)
    if "removed from swap directory" not in result.output:
        fail("--remove-stale-swap did not say what it removed:\n" + result.describe())
    if swap_files(nvme):
        fail(f"files remain after the run with --remove-stale-swap: {swap_files(nvme)}")
    print("--remove-stale-swap removed them, trained, and left nothing")


@case(max_ranks=1)
def in_use(t):
    nvme = t.scratch / "swap"
    nvme.mkdir()
    first = t.start_swapping(nvme)
    try:
        t.refused(t.run(nvme), "is in use by another run", f"(pid {first.pid} on host")
    finally:
        kill_group(first)
        first.communicate()


@case()
def clean_exit(t):
    nvme = t.scratch / "swap"
    nvme.mkdir()
    json_path = t.scratch / "report.json"
    result = t.run(nvme, extra=["--json", json_path])
    t.trained(result)
    on_nvme = [m["on_nvme"] for m in read_json(json_path)["memory"]]
    if not all(on_nvme):
        fail(f"some rank kept nothing on NVMe ({on_nvme}): the test would prove nothing")
    left = sorted(str(p.relative_to(nvme)) for p in nvme.rglob("*"))
    if left:
        fail(f"a normal run left {left} in {nvme}")
    print(f"trained with {on_nvme} bytes on NVMe per rank; {nvme} is empty again")


@case(min_ranks=2)
def one_rank_fault(t):
    # A killed 1-rank run leaves stale files in rank 0's directories only; at t.ranks ranks, rank 0
    # refuses them while the others build their stores and wait for rank 0 in a collective.
    nvme = t.scratch / "swap"
    nvme.mkdir()
    t.kill_while_swapping(nvme, ranks=1)
    t.refused(t.run(nvme), "swap directory " + str(nvme / "zero_swap"), "/rank0 holds",
              "left by a run that did not exit cleanly")


@case(max_ranks=1)
def config_paths(t):
    optimizer_path, parameters_path = t.scratch / "optimizer_path", t.scratch / "parameters_path"
    optimizer_path.mkdir()
    parameters_path.mkdir()
    config = json.loads((HERE.parents[1] / "examples/train_mlp/ds_config_nvme.json").read_text())
    config["zero_optimization"]["offload_optimizer"]["nvme_path"] = str(optimizer_path)
    config["zero_optimization"]["offload_param"]["nvme_path"] = str(parameters_path)
    config_path = t.scratch / "ds_config.json"
    config_path.write_text(json.dumps(config, indent=2))
    process = t.train_mlp.start(["--config", config_path, "--layers", "32,256,256,8",
                                 "--data-rows", 64, "--steps", 100000])
    try:
        def placed():
            return [f for f in swap_files(optimizer_path) + swap_files(parameters_path)
                    if f.endswith(".swp")]
        if not wait_until(lambda: len(placed()) >= 4 or process.poll() is not None, 60):
            fail(f"no swap files appeared within 60 s: {placed()}")
        optimizer_files, parameter_files = swap_files(optimizer_path), swap_files(parameters_path)
    finally:
        kill_group(process)
        process.communicate()
    print(f"offload_optimizer.nvme_path holds {optimizer_files}; "
          f"offload_param.nvme_path holds {parameter_files}")
    if not any(f.startswith("zero_swap/parameters/") for f in parameter_files) or any(
            f.startswith("zero_swap/parameters/") for f in optimizer_files):
        fail("the parameters' swap files are not under offload_param.nvme_path")
    if not any(f.startswith("zero_swap/optimizer/") for f in optimizer_files):
        fail("the optimizer's swap files are not under offload_optimizer.nvme_path")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--case", action="append", choices=sorted(CASES),
                        help="run this case (repeatable); default: all that apply at --ranks")
    parser.add_argument("--scratch-base", default=None, help="where scratch directories go")
    args = parser.parse_args()

    def applies(name):
        _, low, high = CASES[name]
        return low <= args.ranks and (high is None or args.ranks <= high)

    names = args.case or [name for name in CASES if applies(name)]
    for name in names:
        if not applies(name):
            skip(f"case {name} does not apply at {args.ranks} rank(s)")
    train_mlp = TrainMlp(args.train_mlp, args.mpirun, timeout_s=90)
    for name in names:
        print(f"--- {name}, {args.ranks} rank(s)", flush=True)
        with ScratchDir(args.scratch_base) as scratch:
            CASES[name][0](Faults(train_mlp, args.ranks, scratch))
    print(f"PASS: {', '.join(names)} at {args.ranks} rank(s)")


if __name__ == "__main__":
    main()
