#!/usr/bin/env python3
"""The largest model each placement trains on this machine, found by search, beside zero-estimate's
prediction for the machine's device memory, host memory and free disk.

The model is train_mlp's: `--depth` square layers of width H (depth x (H^2 + H) parameters), at
ZeRO stage 3, bf16, a batch of --batch rows, two steps. A trial trains it once; it fits when
train_mlp exits 0 (an allocation that fails, in device memory, host memory or on disk, is an error
that ends the run). Each placement's search starts at the estimator's prediction, steps up or down
by --step until the outcome flips, then halves the interval until the largest model that trained
and the smallest that did not are within --tolerance of each other.

Placements, with --device cuda (docs/zero-offload.md, docs/zero-infinity-gpu.md):
  device only                                     every model state in device memory
  optimizer states in host memory                 --offload-optimizer
  optimizer states on NVMe                        --nvme DIR
  parameters and optimizer states in host memory  --offload-optimizer --offload-param
  parameters and optimizer states on NVMe         --nvme DIR --nvme-params
and with --device host (the host is the device: no host-memory rows; docs/nvme-tier.md):
  device only                                     every model state in host memory
  optimizer states on NVMe                        --nvme DIR
  parameters and optimizer states on NVMe         --nvme DIR --nvme-params

  python3 tools/zero_largest_model.py --device cuda --nvme-dir /local_nvme --json out.json

A placement's search stops early when --max-seconds has passed; its row then says what it had.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PLACEMENTS = {
    "cuda": [
        ("device only", []),
        ("optimizer states in host memory", ["--offload-optimizer"]),
        ("optimizer states on NVMe", ["--nvme", "{nvme}"]),
        ("parameters and optimizer states in host memory", ["--offload-optimizer",
                                                            "--offload-param"]),
        ("parameters and optimizer states on NVMe", ["--nvme", "{nvme}", "--nvme-params"]),
    ],
    "host": [
        ("device only", []),
        ("optimizer states on NVMe", ["--nvme", "{nvme}"]),
        ("parameters and optimizer states on NVMe", ["--nvme", "{nvme}", "--nvme-params"]),
    ],
}


def parameters(width, depth):
    return depth * (width * width + width)


def width_for(params, depth):
    return max(1, int(math.sqrt(params / depth)))


def host_memory_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("zero_largest_model: no MemTotal in /proc/meminfo; give --host-memory")


def device_memory_bytes():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             check=True).stdout
        return int(out.split()[0]) * 1024 * 1024
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        raise SystemExit("zero_largest_model: nvidia-smi did not give the device's memory; give "
                         "--device-memory")


def predictions(a, device, host, disk):
    """zero-estimate's largest model per placement at stage 3, by placement name."""
    # The placements' table needs a tier below the device: without a disk, 1 byte of NVMe (whose
    # rows are left out).
    command = [*a.estimate.split(), "--stage", "3", "--json", "--device-memory", f"{device}B",
               "--nvme-memory", f"{max(disk, 1)}B"]
    if a.device == "cuda":
        command += ["--host-memory", f"{host}B"]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"zero_largest_model: {' '.join(command)} failed:\n{out.stderr}")
    rows = json.loads(out.stdout)["placements"]["rows"]
    return {r["placement"]: (r["largest_model_parameters"], r["bound_by"]) for r in rows}


class Search:
    def __init__(self, a, name, flags):
        self.a, self.name, self.flags = a, name, flags
        self.trained, self.failed = None, None  # widths
        self.why = ""  # the last failure's last line
        self.trials, self.cut_short = 0, False

    def trial(self, width):
        a = self.a
        layers = ",".join([str(width)] * (a.depth + 1))
        command = [*a.trainer.split(), "--stage", "3", "--dtype", "bf16", "--layers", layers,
                   "--batch", str(a.batch), "--data-rows", str(a.batch), "--steps", "2",
                   "--device", a.device,
                   *[f.replace("{nvme}", a.swap) for f in self.flags]]
        self.trials += 1
        env = dict(os.environ)  # a packed train_mlp (tools/gpu-pack) needs the pack's libraries
        if "ZERO_GPU_PACK_LD_LIBRARY_PATH" in env:
            env["LD_LIBRARY_PATH"] = env["ZERO_GPU_PACK_LD_LIBRARY_PATH"]
        try:
            out = subprocess.run(command, capture_output=True, text=True,
                                 timeout=a.trial_timeout, env=env)
            ok = out.returncode == 0
            tail = (out.stderr or out.stdout).strip().splitlines()
        except subprocess.TimeoutExpired:
            ok, tail = False, [f"timed out after {a.trial_timeout} s"]
        if not ok:
            self.why = tail[-1] if tail else "failed"
        if a.verbose:
            print(f"  {self.name}: {parameters(width, a.depth) / 1e9:.3f} B "
                  f"(width {width}): {'trained' if ok else 'failed: ' + self.why}", flush=True)
        if a.swap:  # a failed run may leave its swap files: only in the search's own directory
            for entry in os.listdir(a.swap):
                path = os.path.join(a.swap, entry)
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
        return ok

    def run(self, start_width, deadline):
        a = self.a
        width = max(1, start_width)
        while self.trained is None or self.failed is None:  # bracket
            if time.monotonic() > deadline:
                self.cut_short = True
                return
            if self.trial(width):
                self.trained = width
                if self.failed is None:
                    width = max(width + 1, int(width * a.step))
            else:
                self.failed = width
                if self.trained is None:
                    if width == 1:
                        return
                    width = max(1, int(width / a.step))
        while parameters(self.failed, a.depth) > parameters(self.trained, a.depth) * (
                1 + a.tolerance) and self.failed - self.trained > 1:  # bisect
            if time.monotonic() > deadline:
                self.cut_short = True
                return
            mid = (self.trained + self.failed) // 2
            if self.trial(mid):
                self.trained = mid
            else:
                self.failed = mid


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "host"], default="cuda")
    p.add_argument("--trainer", default=os.path.join(ROOT, "build", "gpu", "examples",
                                                     "train_mlp", "train_mlp"),
                   help="train_mlp (a command line: its words are split on spaces)")
    p.add_argument("--estimate", default=os.path.join(ROOT, "build", "gpu", "tools",
                                                      "zero-estimate", "zero-estimate"),
                   help="zero-estimate (a command line)")
    p.add_argument("--nvme-dir", default="", help="where the NVMe tier's runs make a directory of "
                   "their own, removed at the end (the disk's free space is the NVMe size; without "
                   "it the NVMe placements are left out)")
    p.add_argument("--device-memory", type=int, help="bytes (default: nvidia-smi's total, or "
                   "the host's memory with --device host)")
    p.add_argument("--host-memory", type=int, help="bytes (default: /proc/meminfo's MemTotal)")
    p.add_argument("--nvme-memory", type=int, help="bytes (default: the free space of --nvme-dir)")
    p.add_argument("--depth", type=int, default=8, help="square layers of the model (default 8)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="the largest trained model and the smallest failed one within this "
                   "fraction of each other (default 0.05)")
    p.add_argument("--step", type=float, default=1.15,
                   help="the width's factor while bracketing (default 1.15)")
    p.add_argument("--trial-timeout", type=float, default=1800)
    p.add_argument("--max-seconds", type=float, default=float("inf"),
                   help="per placement; a search cut short says so")
    p.add_argument("--placements", default="", help="comma-separated names (default: all)")
    p.add_argument("--json", default="", help="also write the table to this file")
    p.add_argument("--verbose", action="store_true", help="print each trial")
    a = p.parse_args()
    if a.tolerance <= 0 or a.step <= 1:
        p.error("--tolerance must be positive and --step above 1")

    host = a.host_memory or host_memory_bytes()
    device = a.device_memory or (host if a.device == "host" else device_memory_bytes())
    disk = a.nvme_memory or (shutil.disk_usage(a.nvme_dir).free if a.nvme_dir else 0)
    a.swap = tempfile.mkdtemp(prefix="zero-largest-model-", dir=a.nvme_dir) if a.nvme_dir else ""
    try:
        return search_all(a, device, host, disk)
    finally:
        if a.swap:
            shutil.rmtree(a.swap, ignore_errors=True)


def search_all(a, device, host, disk):
    predicted = predictions(a, device, host, disk)
    wanted = [n.strip() for n in a.placements.split(",") if n.strip()]
    rows = []
    print(f"largest train_mlp per placement, --device {a.device}, stage 3, bf16, {a.depth} "
          f"square layers, batch {a.batch}; device {device / 1e9:.1f} GB, host {host / 1e9:.1f} "
          f"GB, NVMe {disk / 1e9:.1f} GB (free)")
    print(f"{'placement':<48}{'trained':>10}{'failed':>10}{'predicted':>11}{'found/pred':>11}"
          f"  bound by / why")
    for name, flags in PLACEMENTS[a.device]:
        if wanted and name not in wanted:
            continue
        prediction, bound = predicted.get(name, (None, None))
        row = {"placement": name, "predicted_parameters": prediction, "bound_by": bound}
        if "{nvme}" in flags and not a.nvme_dir:
            row["why"] = "no --nvme-dir"
            print(f"{name:<48}{'-':>10}{'-':>10}{'-':>11}{'-':>11}  {row['why']}")
            rows.append(row)
            continue
        search = Search(a, name, flags)
        start = width_for(prediction, a.depth) if prediction else 256
        search.run(start, time.monotonic() + a.max_seconds)
        trained = parameters(search.trained, a.depth) if search.trained else None
        failed = parameters(search.failed, a.depth) if search.failed else None
        row.update({"trained_parameters": trained, "failed_parameters": failed,
                    "trials": search.trials, "cut_short": search.cut_short,
                    "last_failure": search.why})
        if trained and prediction:
            row["found_over_predicted"] = trained / prediction
        rows.append(row)

        def b(n):
            return f"{n / 1e9:.3f} B" if n else "-"
        ratio = f"{trained / prediction:.3f}" if trained and prediction else "-"
        note = f"{bound}; {search.trials} trials" + (", cut short" if search.cut_short else "")
        print(f"{name:<48}{b(trained):>10}{b(failed):>10}{b(prediction):>11}{ratio:>11}  {note}")
        if search.why:
            print(f"{'':<48}  last failure: {search.why[:120]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "device_memory_bytes": device,
                       "host_memory_bytes": host, "nvme_memory_bytes": disk, "depth": a.depth,
                       "batch": a.batch, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
