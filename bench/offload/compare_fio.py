#!/usr/bin/python3
"""The NVMe tier's swap bandwidth next to fio's raw O_DIRECT bandwidth on the same file system.

    /usr/bin/python3 bench/offload/compare_fio.py --bench build/nvme/bench/offload/zero_bench_swap \\
        --dir /tmp --size 2G --block-sizes 1M,256K --queue-depths 8,32 --rounds 5

For every block size and queue depth, each round runs, back to back on one file of --size bytes:
  - fio, sequential write then sequential read (ioengine=io_uring, direct=1, one job, iodepth =
    the queue depth, bs = the block size): what the disk gives a program that does nothing else;
  - zero_bench_swap with the same block size and queue depth, writing then reading the file
    through a SwapFile, with checksums (the default) and without.
A virtual disk shared with other machines changes speed from minute to minute, so the rounds
alternate which program goes first, and the table gives the median of each program's rounds and
the median of the per-round ratios (zero / fio of the same round). Prints a Markdown table.
Needs fio (Debian: fio) and a zero_bench_swap built from bench/offload.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys


def parse_bytes(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    if text and text[-1].upper() in scale:
        return int(text[:-1]) * scale[text[-1].upper()]
    return int(text)


def human(nbytes):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def fio(path, direction, block, depth, size):
    command = ["fio", "--name=zero_compare", f"--filename={path}", f"--rw={direction}",
               f"--bs={block}", f"--iodepth={depth}", "--ioengine=io_uring", "--direct=1",
               f"--size={size}", "--numjobs=1", "--output-format=json"]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    job = json.loads(result.stdout)["jobs"][0]
    return job[direction]["bw_bytes"] / 1e9


def fio_round(directory, block, depth, size):
    path = os.path.join(directory, "zero_compare_fio.file")
    try:
        return {"write": fio(path, "write", block, depth, size),
                "read": fio(path, "read", block, depth, size)}
    finally:
        if os.path.exists(path):
            os.remove(path)


def zero_round(bench, directory, block, depth, size, checksums, extra):
    command = [bench, f"--dir={directory}", f"--size={size}", f"--block-size={block}",
               f"--queue-depth={depth}", "--json"] + extra
    if not checksums:
        command.append("--no-checksums")
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    rates = {}
    for line in result.stdout.splitlines():
        record = json.loads(line)
        if not record["direct_io"]:
            sys.exit(f"zero_bench_swap fell back to buffered I/O in {directory}: no comparison")
        rates[record["direction"]] = record["GBps"]
    return rates


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    cores = os.cpu_count()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return f"{cpu}, {cores} cores, {memory:.0f} GiB, Linux {platform.release()}"


def file_system(directory):
    result = subprocess.run(["df", "--output=source,fstype", directory], capture_output=True,
                            text=True)
    lines = result.stdout.split("\n")
    return " ".join(lines[1].split()) if len(lines) > 1 else "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bench", default="build/nvme/bench/offload/zero_bench_swap")
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--size", default="2G")
    parser.add_argument("--block-sizes", default="1M,256K")
    parser.add_argument("--queue-depths", default="8,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bench-args", default="", help="more zero_bench_swap flags, quoted")
    args = parser.parse_args()

    size = parse_bytes(args.size)
    blocks = [parse_bytes(b) for b in args.block_sizes.split(",")]
    depths = [int(d) for d in args.queue_depths.split(",")]
    extra = args.bench_args.split()
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    combos = [(b, d) for b in blocks for d in depths]
    runs = {combo: {"fio": [], "zero": [], "zero_unchecked": []} for combo in combos}

    for round_index in range(args.rounds):
        for combo in combos:
            block, depth = combo
            steps = [("fio", lambda: fio_round(args.dir, block, depth, size)),
                     ("zero", lambda: zero_round(args.bench, args.dir, block, depth, size, True,
                                                 extra)),
                     ("zero_unchecked", lambda: zero_round(args.bench, args.dir, block, depth,
                                                           size, False, extra))]
            if round_index % 2 == 1:
                steps.reverse()
            for name, step in steps:
                runs[combo][name].append(step())
            last = {name: runs[combo][name][-1] for name, _ in steps}
            print(f"round {round_index} block {human(block)} depth {depth}: " +
                  ", ".join(f"{name} write {r['write']:.3f} read {r['read']:.3f} GB/s"
                            for name, r in last.items()), file=sys.stderr, flush=True)

    command = " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:])
    print(f"`{command}`, {datetime.date.today().isoformat()}; {machine()}; "
          f"{args.dir} on {file_system(args.dir)}; {fio_version}; file {human(size)}; "
          f"medians of {args.rounds} alternating rounds.\n")
    print("| block size | queue depth | direction | fio GB/s | zero GB/s | zero / fio "
          "| zero, no checksums, GB/s | zero, no checksums / fio |")
    print("|---|---|---|---|---|---|---|---|")
    for block, depth in combos:
        run = runs[(block, depth)]
        for direction in ("write", "read"):
            fio_rates = [r[direction] for r in run["fio"]]
            cells = [human(block), str(depth), direction, f"{statistics.median(fio_rates):.2f}"]
            for name in ("zero", "zero_unchecked"):
                rates = [r[direction] for r in run[name]]
                ratios = [z / f for z, f in zip(rates, fio_rates)]
                cells += [f"{statistics.median(rates):.2f}", f"{statistics.median(ratios):.2f}"]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
