#!/usr/bin/python3
"""Under a RAM cap that the model's optimizer states alone exceed, train_mlp trains with the states
on NVMe (a DeepSpeed config's offload sections) and the same model with its states in memory is
killed: ZeRO-Infinity's promise, checked with a memory cgroup.

The model (20M parameters, 21 layers of width 1024, fp32 Adam) has 240 MB of fp32 master weights
and Adam moments (12 bytes per parameter), and 400 MB of model states and buffers in memory without
offload; the cap is the binary's own footprint (the peak RSS of `train_mlp --help`: its libraries,
148 MB more where it links cuBLAS for --device cuda) plus --cap-mb (200 MB; RAM and page cache as
the kernel counts them for the cgroup, no swap). The config is examples/train_mlp/ds_config_nvme.json (stage 3, optimizer states and
parameters on NVMe) with its two nvme_path keys pointing at a scratch directory, passed with
--config alone, so that train_mlp takes the paths from it. Checks:

  * with the states on NVMe the run completes, without an OOM kill in the cgroup, and its loss
    falls (6 steps on one batch: the last loss below half the first);
  * its model's master weights and moments (as it reports them, wherever they live) exceed
    --cap-mb, what the cap leaves beside the binary itself: the run proves something;
  * its peak RSS (getrusage, from --json) is below the cap, and it leaves no swap files;
  * the control, the same config without its offload sections under the same cap, fails: the OOM
    killer ends it (or its allocation fails), so the cap is tight enough that offloading is what
    made the difference.

Exits 77 (skipped) with the reason where no memory cgroup can be made (not root, no memory
controller) or where the scratch directory is on tmpfs (the swap files would be RAM the cap counts).
"""

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from train_mlp_driver import (MemoryCgroup, ScratchDir, TrainMlp, add_arguments,  # noqa: E402
                              fail, file_system_type, read_json, skip, swap_files)

MB = 1e6
LAYERS = ",".join(map(str, [32] + [1024] * 20 + [8]))
# gelu and a small learning rate: the loss of a 21-layer net falls steadily within a few steps.
TRAINING = ["--layers", LAYERS, "--steps", 6, "--data-rows", 64, "--activation", "gelu",
            "--lr", "1e-4", "--print-every", 1]


def configs(source, swap, scratch):
    """The NVMe config with both nvme_path keys at `swap`, and the same without offloading."""
    nvme = json.loads(Path(source).read_text())
    zero = nvme["zero_optimization"]
    for section in ("offload_optimizer", "offload_param"):
        if zero.get(section, {}).get("device") != "nvme":
            fail(f"{source}: expected zero_optimization.{section}.device \"nvme\"")
        zero[section]["nvme_path"] = str(swap)
    in_memory = json.loads(json.dumps(nvme))
    for section in ("offload_optimizer", "offload_param"):
        del in_memory["zero_optimization"][section]
    paths = scratch / "ds_config_nvme.json", scratch / "ds_config_in_memory.json"
    for path, config in zip(paths, (nvme, in_memory)):
        path.write_text(json.dumps(config, indent=2))
    return paths


def startup_bytes(binary):
    """The peak RSS of `binary --help`: what the process costs before it trains (its libraries)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    subprocess.run([str(binary), "--help"], capture_output=True, check=True, timeout=60)
    # ru_maxrss of the children is the largest of any child so far, in KiB: this one is the first.
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if after <= before:
        fail("could not measure the startup footprint of train_mlp (an earlier child was larger)")
    return after * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--config",
                        default=HERE.parents[1] / "examples/train_mlp/ds_config_nvme.json")
    parser.add_argument("--cap-mb", type=float, default=200)
    parser.add_argument("--ranks", type=int, default=1,
                        help="the cap covers every rank (and mpirun) together")
    parser.add_argument("--swap-base", default=None, help="where the swap directory goes (/tmp)")
    args = parser.parse_args()
    startup = startup_bytes(args.train_mlp)
    margin = int(args.cap_mb * MB)
    cap = startup * args.ranks + margin  # each rank loads its libraries
    print(f"train_mlp --help peaks at {startup / MB:.1f} MB RSS: the cap is that per rank plus "
          f"{args.cap_mb:.0f} MB, {cap / MB:.1f} MB")
    train_mlp = TrainMlp(args.train_mlp, args.mpirun, timeout_s=150)

    with ScratchDir(args.swap_base) as scratch:
        kind = file_system_type(scratch)
        if kind in ("tmpfs", "ramfs"):
            skip(f"{scratch} is on {kind}: the swap files would be RAM that the cap counts "
                 "(pass --swap-base on a disk)")
        swap = scratch / "swap"
        swap.mkdir()
        nvme_config, memory_config = configs(args.config, swap, scratch)
        json_path = scratch / "nvme.json"

        with MemoryCgroup(cap, name=f"zero_ram_cap_nvme_{scratch.name}") as cgroup:
            if cgroup.refused:
                skip(cgroup.refused)
            result = train_mlp.run(["--config", nvme_config, "--json", json_path] + TRAINING,
                                   ranks=args.ranks, cgroup=cgroup)
            oom_kills, cgroup_peak = cgroup.oom_kills(), cgroup.peak_bytes()
        print(f"states on NVMe, under a {cap / MB:.0f} MB cap: {result.seconds:.1f} s, exit code "
              f"{result.returncode}, OOM kills {oom_kills}, cgroup peak "
              f"{(cgroup_peak or 0) / MB:.1f} MB")
        if result.returncode != 0 or result.timed_out:
            fail(f"with the states on NVMe, train_mlp did not complete under the {cap / MB:.0f} MB "
                 f"cap (OOM kills in the cgroup: {oom_kills}):\n" + result.describe())
        if oom_kills:
            fail(f"the OOM killer ended {oom_kills} process(es) of the NVMe run")
        report = read_json(json_path)
        memory = report["memory"]
        states = sum(m["master_weights"] + m["optimizer_states"] for m in memory)
        peak = sum(m["peak_rss"] for m in memory)  # at least the peak of the ranks together
        loss = report["loss"]
        print(f"{report['psi']} parameters; master weights and moments {states / MB:.1f} MB, "
              f"on NVMe {sum(m['on_nvme'] for m in memory) / MB:.1f} MB; peak RSS "
              f"{peak / MB:.1f} MB (ranks summed); loss {loss[0]:.6g} -> {loss[-1]:.6g}")
        if states <= margin:
            fail(f"the master weights and moments ({states / MB:.1f} MB) fit in what the cap "
                 f"leaves beside the binary ({margin / MB:.0f} MB): the test proves nothing; "
                 "raise the model or lower --cap-mb")
        if peak >= cap:
            fail(f"peak RSS {peak / MB:.1f} MB is not below the {cap / MB:.0f} MB cap")
        if not loss[-1] < loss[0] / 2:
            fail(f"the loss did not fall: {loss}")
        if swap_files(swap):
            fail(f"swap files remain after a normal run: {swap_files(swap)}")

        with MemoryCgroup(cap, name=f"zero_ram_cap_memory_{scratch.name}") as cgroup:
            if cgroup.refused:
                skip(cgroup.refused)
            control = train_mlp.run(["--config", memory_config] + TRAINING, ranks=args.ranks,
                                    cgroup=cgroup)
            oom_kills = cgroup.oom_kills()
        print(f"control, states in memory, same cap: {control.seconds:.1f} s, exit code "
              f"{control.returncode}, OOM kills {oom_kills}")
        if control.timed_out:
            fail("the control (states in memory) hung instead of failing:\n" + control.describe())
        if control.returncode == 0:
            fail(f"the control (states in memory) completed under the {cap / MB:.0f} MB cap: the "
                 "cap does not bind, so the NVMe run's success shows nothing")
        out_of_memory = ("bad_alloc", "Cannot allocate memory", "out of memory")
        if not oom_kills and not any(w in control.output for w in out_of_memory):
            fail("the control failed, but neither by an OOM kill nor for want of memory:\n"
                 + control.describe())
    print(f"PASS: {states / MB:.0f} MB of optimizer states train under a {cap / MB:.0f} MB RAM "
          f"cap on NVMe (peak RSS {peak / MB:.0f} MB); in memory the same model is "
          + ("OOM-killed" if oom_kills else "refused its memory"))


if __name__ == "__main__":
    main()
