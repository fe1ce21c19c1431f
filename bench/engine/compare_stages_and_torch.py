#!/usr/bin/env python3
"""Step time of zero's stages 0-3 against their PyTorch 2.x counterparts, on the same MLP, weights,
data, batch and world size, and a check that both sides compute the same losses:

    zero stage 0   torch DistributedDataParallel, torch.optim.Adam(fused=True)
    zero stage 1   DDP + ZeroRedundancyOptimizer(optimizer_class=torch.optim.Adam, fused=True)
    zero stage 2   FSDP2 fully_shard(reshard_after_forward=False), Adam(fused=True)
    zero stage 3   FSDP2 fully_shard(reshard_after_forward=True), Adam(fused=True)

    compare_stages_and_torch.py --train-mlp build/release/examples/train_mlp/train_mlp
    compare_stages_and_torch.py --train-mlp ... --stages 0,2 --busy 1   # one core busy throughout

Defaults: 2 ranks x 1 thread (OMP_NUM_THREADS=1, torch.set_num_threads(1)), CPU, gloo, fp32, an
MLP of 1024,2048x5,1024 (21.0M parameters, tanh, MSE), global batch 16, Adam lr 1e-3, zero's
reduction buckets of 4M elements. A run's time per step is the median of its steps after the
warm-up (each step timed on the slowest rank); a pairing's is the median of 4 rounds, each of which
runs zero and torch once, in alternating order. Prints a Markdown table (docs/engine-performance.md
keeps the last one) and exits 1 when losses differ by more than --loss-tolerance (relative).

PyTorch. The script needs torch >= 2.6 and numpy; by default it builds a virtual environment for
them (--venv, default ~/.cache/zero/torch-venv) and re-runs itself there; --python uses an existing
interpreter instead (Debian's torch 1.13: --python /usr/bin/python3 runs the DDP pairings with the
default Adam, as 1.13 has no fused CPU Adam, and skips the FSDP2 ones). PyPI has no CPU-only Linux
wheel: its torch wheel is built for CUDA and depends on about 2.3 GB of nvidia-* wheels and triton.
The environment therefore gets, in this order, only what a CPU run with gloo needs:
  1. `pip install --no-deps torch numpy` and torch's pure-Python requirements (filelock,
     typing-extensions, setuptools, sympy, networkx, jinja2, fsspec): torch 2.15.0 is a 539 MB
     download, 1.4 GB installed. torch cannot be imported yet: libtorch_cuda.so links CUDA.
  2. While `import torch` fails on a missing CUDA library (or on a symbol a system copy lacks),
     the requirement torch's metadata names for that library, pinned as torch pins it. With a
     CUDA toolkit in the system's library path (this project's machines: /usr/local/cuda-13.0)
     that is nvidia-cufile (through cuda-toolkit[cufile]), nvidia-cusparselt-cu13,
     nvidia-nvshmem-cu13 (+ nvidia-cuda-cccl) and nvidia-nccl-cu13 (the system NCCL is older than
     torch's): 0.5 GB more to download, 2.1 GB installed in all. Without one, step 2 collects most
     nvidia-* wheels one by one (but not triton, cuda-bindings or cusolver, which torch loads lazily).
  3. Only if that fails: the full `pip install torch` (torch 2.15.0: 3.0 GB download, 5.3 GB).
download.pytorch.org, which has CPU-only wheels, is not used: these machines cannot reach it.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "engine"))  # torch_reference.py

PAIRINGS = [  # zero stage, how PyTorch distributes (a key of torch_reference.WRAPPINGS)
    (0, "ddp"),
    (1, "ddp_zero"),
    (2, "fsdp2_keep"),
    (3, "fsdp2_reshard"),
]

# The probe of an environment: torch imports, and gloo all-reduces on the CPU.
PROBE = """
import os, tempfile
import numpy, torch, torch.distributed as dist
with tempfile.TemporaryDirectory() as d:
    dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "rendezvous"), rank=0, world_size=1)
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.destroy_process_group()
print(torch.__version__)
"""

# What a missing library's (or symbol's) name contains -> what torch's requirement for it is named
# (the name of an nvidia-* wheel, or an extra of cuda-toolkit). First match wins.
CUDA_LIBRARIES = [
    ("cusparselt", ("cusparselt",)),
    ("cusparse", ("cusparse",)),
    ("cusolver", ("cusolver",)),
    ("cublas", ("cublas",)),
    ("cudnn", ("cudnn",)),
    ("cufft", ("cufft",)),
    ("cufile", ("cufile",)),
    ("cupti", ("cupti",)),
    ("nvrtc", ("nvrtc",)),
    ("nvjitlink", ("nvjitlink",)),
    ("nvshmem", ("nvshmem",)),
    ("nccl", ("nccl",)),
    ("nvtoolsext", ("nvtx",)),
    ("cudart", ("cudart", "cuda-runtime")),
    ("cuda", ("cudart", "cuda-runtime")),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---- the environment --------------------------------------------------------------------------------

def probe(python):
    """None when `python` imports torch and numpy and runs gloo; the error text otherwise."""
    run = subprocess.run([python, "-c", PROBE], capture_output=True, text=True)
    return None if run.returncode == 0 else (run.stderr.strip().splitlines() or ["failed"])[-1]


def torch_requirements(python):
    code = "import importlib.metadata as m, json; print(json.dumps(m.requires('torch') or []))"
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def is_cuda_requirement(requirement):
    return re.match(r"\s*(nvidia-|cuda-|triton)", requirement, re.IGNORECASE) is not None


def requirement_for_library(error, requirements):
    """torch's pinned requirement that provides the library `error` says is missing, or None."""
    found = re.search(r"(lib[\w.+-]+?)\.so[\w.]*: cannot open", error) or re.search(r"undefined symbol: (\w+)", error)
    if not found:
        return None
    missing = found.group(1).lower()
    names = next((names for key, names in CUDA_LIBRARIES if key in missing), None)
    for requirement in requirements if names else []:
        parsed = re.match(r"\s*([\w.-]+)\s*(?:\[([^\]]*)\])?\s*([^;]*)", requirement)
        name, extras, version = parsed.group(1), parsed.group(2) or "", parsed.group(3).strip()
        extras = [e.strip() for e in extras.split(",") if e.strip()]
        for wanted in names:
            if wanted in extras:
                return f"{name}[{wanted}]{version}"
            if wanted in name.lower():
                return f"{name}{version}"
    return None


def ensure_venv(venv, torch_spec):
    """The Python of `venv`, created and filled (see the docstring) when it cannot run torch yet."""
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(python) and probe(python) is None:
        return python
    if not os.path.exists(python):
        log(f"creating the virtual environment {venv}")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off"]
    log(f"installing {torch_spec} without its CUDA dependencies, and numpy")
    subprocess.run(pip + ["--no-deps", torch_spec, "numpy"], check=True)
    requirements = torch_requirements(python)
    pure_python = [r for r in requirements if "extra ==" not in r and not is_cuda_requirement(r)]
    subprocess.run(pip + pure_python, check=True)
    installed = set()
    while (error := probe(python)) is not None:
        requirement = requirement_for_library(error, requirements)
        if requirement is None or requirement in installed:
            log(f"torch does not run yet ({error}): installing torch with all its dependencies")
            subprocess.run(pip + [torch_spec], check=True)
            error = probe(python)
            if error is not None:
                sys.exit(f"{venv}: torch still does not run: {error}")
            break
        log(f"torch does not run yet ({error}): installing {requirement}")
        subprocess.run(pip + [requirement], check=True)  # with its own dependencies (cudnn: cublas)
        installed.add(requirement)
    return python


# ---- the comparison (runs in the interpreter with torch) -------------------------------------------

def machine():
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    cores = len(re.findall(r"^processor\s*:", cpuinfo, re.MULTILINE))
    return f"{model.group(1).strip() if model else 'unknown CPU'}, {cores} cores"


def compare(args):
    import statistics

    try:
        import torch
    except ImportError as error:
        sys.exit(f"{sys.executable} cannot import torch ({error}): give --python an interpreter with torch "
                 "and numpy, or leave it out to let the script build a virtual environment")
    import torch_reference as reference

    widths = reference.parse_widths(args.layers)
    features = reference.torch_features()
    fused = features["fused_cpu_adam"]
    adam = "Adam fused" if fused else "Adam (not fused)"
    notes = []
    if not fused:
        notes.append(f"torch {torch.__version__} has no fused CPU Adam (2.4 and later): its rows use "
                     "torch.optim.Adam's default implementation.")
    pairings = []
    for stage, wrapping in [p for p in PAIRINGS if str(p[0]) in args.stages.split(",")]:
        if wrapping.startswith("fsdp2") and not features["fsdp2"]:
            notes.append(f"skipped: zero stage {stage} vs {reference.WRAPPINGS[wrapping]}: torch {torch.__version__} "
                         "has no FSDP2 (torch.distributed.fsdp.fully_shard, 2.4 and later).")
        else:
            pairings.append((stage, wrapping))
    for note in notes:
        log(note)

    steps = args.steps + args.warmup
    zero_times = {stage: [] for stage, _ in pairings}
    zero_update = {stage: [] for stage, _ in pairings}
    torch_times = {stage: [] for stage, _ in pairings}
    loss_error = {stage: 0.0 for stage, _ in pairings}
    with tempfile.TemporaryDirectory() as directory:
        reference.make_inputs(directory, widths, args.rows, seed=args.seed)
        busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.busy)]
        try:
            flags = {"--layers": args.layers, "--steps": steps, "--batch": args.batch, "--bucket": args.bucket,
                     "--optimizer": "adam", "--lr": args.lr, "--data-npy": directory, "--init-npy": directory,
                     "--print-every": 10 ** 9}
            spec = {"widths": widths, "batch": args.batch, "steps": steps, "lr": args.lr, "weight_decay": 0.0,
                    "optimizer": "adam", "fused": fused, "threads": args.threads}
            for round_index in range(args.rounds):
                for stage, wrapping in pairings:
                    def run_zero():
                        report = reference.run_train_mlp(args.train_mlp, args.mpirun, args.ranks,
                                                         dict(flags, **{"--stage": stage}), threads=args.threads)
                        zero_times[stage].append(statistics.median(report["step_seconds"][args.warmup:]))
                        zero_update[stage].append(report["rank0_seconds"]["step"] / steps)
                        return report["loss"]

                    def run_torch():
                        try:
                            result = reference.train_torch(dict(spec, wrapping=wrapping), args.ranks, directory)
                        except Exception as error:  # a rare gloo teardown abort; a second failure is real
                            log(f"the torch run failed ({error}); running it again")
                            result = reference.train_torch(dict(spec, wrapping=wrapping), args.ranks, directory)
                        torch_times[stage].append(statistics.median(result["step_seconds"][args.warmup:]))
                        return result["loss"]

                    if round_index % 2 == 0:
                        zero_loss, torch_loss = run_zero(), run_torch()
                    else:
                        torch_loss, zero_loss = run_torch(), run_zero()
                    loss_error[stage] = max(loss_error[stage], reference.relative_difference(zero_loss, torch_loss))
                    log(f"round {round_index + 1}/{args.rounds}, stage {stage}: zero {zero_times[stage][-1] * 1e3:.1f} ms, "
                        f"{reference.WRAPPINGS[wrapping]} {torch_times[stage][-1] * 1e3:.1f} ms, "
                        f"losses {loss_error[stage]:.1e} apart")
        finally:
            for loop in busy:
                loop.kill()
                loop.wait()

    print(f"Machine: {machine()}; torch {torch.__version__} ({sys.executable}).")
    print(f"MLP {args.layers} ({reference.parameter_count(widths) / 1e6:.1f}M parameters, tanh, MSE), global batch "
          f"{args.batch}, {args.ranks} ranks x {args.threads} thread, CPU, gloo, fp32, Adam lr {args.lr}; zero's "
          f"reduction buckets {args.bucket} elements. Time per step: median of {args.steps} steps after "
          f"{args.warmup} warm-up (slowest rank), median of {args.rounds} rounds alternating zero and torch"
          f"{f'; {args.busy} busy loop(s) beside the ranks throughout' if args.busy else ''}.\n")
    print("| pairing | zero ms/step | zero step() ms (rank 0) | torch ms/step | speedup | loss agreement |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for stage, wrapping in pairings:
        zero_ms = statistics.median(zero_times[stage]) * 1e3
        update_ms = statistics.median(zero_update[stage]) * 1e3
        torch_ms = statistics.median(torch_times[stage]) * 1e3
        worst = max(worst, loss_error[stage])
        print(f"| zero stage {stage} vs {reference.WRAPPINGS[wrapping]}, {adam} | {zero_ms:.1f} | {update_ms:.1f} | "
              f"{torch_ms:.1f} | {torch_ms / zero_ms:.2f}x | {loss_error[stage]:.1e} |")
    print("\nspeedup: torch ms/step / zero ms/step. zero step(): rank 0's time in engine.step() per step, warm-up "
          "included. Loss agreement: the largest relative difference of a step's loss, over all steps and rounds.")
    for note in notes:
        print(note)
    print(f"Largest relative loss difference: {worst:.1e} (tolerance {args.loss_tolerance:.0e}).")
    if worst > args.loss_tolerance:
        sys.exit("zero and PyTorch disagree on the losses")


def main():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-mlp", required=True, help="the train_mlp example program")
    parser.add_argument("--mpirun", default="mpirun")
    interpreter = parser.add_mutually_exclusive_group()
    interpreter.add_argument("--venv", default=os.path.join(cache, "zero", "torch-venv"),
                             help="virtual environment with torch, created when missing (default: %(default)s)")
    interpreter.add_argument("--python", help="an interpreter that has torch and numpy already; no environment is made")
    parser.add_argument("--torch", default="torch>=2.6", help="what --venv installs (default: %(default)s)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layers", default="1024,2048,2048,2048,2048,2048,1024")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rows", type=int, default=256, help="rows of training data")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--bucket", type=int, default=4_000_000, help="zero's reduction bucket, elements")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--stages", default="0,1,2,3", help="zero stages to pair (default: %(default)s)")
    parser.add_argument("--busy", type=int, default=0,
                        help="busy loops beside the ranks for the whole run, both sides (default: none): a "
                             "trainer's own threads share the cores with its collectives")
    parser.add_argument("--loss-tolerance", type=float, default=1e-5)
    parser.add_argument("--in-interpreter", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_interpreter:
        compare(args)
        return
    python = args.python or ensure_venv(args.venv, args.torch)
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:], "--in-interpreter"])


if __name__ == "__main__":
    main()
