"""The MLP of examples/train_mlp in PyTorch, and what it takes to train it next to zero's train_mlp
on the same weights and data. Two scripts import it: tests/engine/compare_with_torch.py (do the
losses and weights agree? CTest, Debian's torch 1.13) and bench/engine/compare_stages_and_torch.py
(how fast is each? torch 2.x).

Weights and data travel as .npy files in one directory, the layout train_mlp reads with --data-npy
and --init-npy and writes with --save-npy: x.npy (rows x widths[0]), y.npy (rows x widths[-1]),
layer{i}.weight.npy (widths[i+1] x widths[i]) and layer{i}.bias.npy.

Both sides take step k's global batch as the `batch` rows after the previous step's (wrapping at
the end of the data), rank r the r-th contiguous share of it, and report the global mean loss.
Needs numpy; the PyTorch half needs torch 1.13 or later (FSDP2 and fused CPU Adam: 2.x).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

# How PyTorch wraps the model and shards the optimizer, one name per zero stage it is compared with.
WRAPPINGS = {
    "ddp": "DistributedDataParallel",
    "ddp_zero": "DistributedDataParallel + ZeroRedundancyOptimizer",
    "fsdp2_keep": "FSDP2 fully_shard, reshard_after_forward=False",
    "fsdp2_reshard": "FSDP2 fully_shard, reshard_after_forward=True",
}


def parse_widths(layers):
    return [int(w) for w in layers.split(",")]


def parameter_count(widths):
    return sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))


def make_inputs(directory, widths, rows, seed):
    """Writes the data and the initial weights as .npy files into `directory`."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, widths[0])).astype(np.float32)
    # A teacher network labels the inputs (a smooth target the student can learn).
    a = x
    for i in range(len(widths) - 1):
        w = rng.uniform(-1, 1, (widths[i + 1], widths[i])).astype(np.float32) * (2 / np.sqrt(widths[i]))
        a = a @ w.T
        if i + 2 < len(widths):
            a = np.tanh(a)
    np.save(os.path.join(directory, "x.npy"), x)
    np.save(os.path.join(directory, "y.npy"), a.astype(np.float32))
    for i in range(len(widths) - 1):
        bound = 1 / np.sqrt(widths[i])
        np.save(os.path.join(directory, f"layer{i}.weight.npy"),
                rng.uniform(-bound, bound, (widths[i + 1], widths[i])).astype(np.float32))
        np.save(os.path.join(directory, f"layer{i}.bias.npy"),
                rng.uniform(-bound, bound, (widths[i + 1],)).astype(np.float32))


def load_weights(directory, layers):
    """{"layer{i}.weight": array, "layer{i}.bias": array} for `layers` linear layers."""
    return {f"layer{i}.{kind}": np.load(os.path.join(directory, f"layer{i}.{kind}.npy"))
            for i in range(layers) for kind in ("weight", "bias")}


def relative_difference(values, reference):
    values, reference = np.asarray(values, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    return float(np.max(np.abs(values - reference) / np.maximum(np.abs(reference), 1e-8)))


def run_train_mlp(train_mlp, mpirun, ranks, flags, threads=None):
    """Runs train_mlp under mpirun with `flags` ({"--stage": 3, ...}) and returns its --json report."""
    with tempfile.TemporaryDirectory() as directory:
        report = os.path.join(directory, "report.json")
        command = [mpirun, "-np", str(ranks), "--oversubscribe", train_mlp, "--json", report]
        for flag, value in flags.items():
            command += [flag, str(value)]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        run = subprocess.run(command, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"train_mlp failed with status {run.returncode}:\n{' '.join(command)}\n"
                               f"{run.stdout}{run.stderr}")
        with open(report) as f:
            return json.load(f)


# ---- the PyTorch side (imports torch only from here on) -------------------------------------------

def torch_features():
    """Which of the 2.x pieces this torch has: {"fused_cpu_adam": bool, "fsdp2": bool}."""
    import torch

    try:
        parameter = torch.nn.Parameter(torch.zeros(4))
        parameter.grad = torch.ones(4)
        torch.optim.Adam([parameter], fused=True).step()
        fused = True
    except (TypeError, RuntimeError):  # 1.13: no such argument, or fused on CUDA only
        fused = False
    return {"fused_cpu_adam": fused, "fsdp2": fully_shard_function() is not None}


def fully_shard_function():
    """FSDP2's fully_shard, or None before torch 2.4 (whose fsdp package may not even import)."""
    import torch

    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 4):
        return None
    try:
        from torch.distributed.fsdp import fully_shard  # 2.6 and later
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard  # 2.4 and 2.5
    return fully_shard


def train_torch(spec, ranks, directory):
    """Trains the MLP with PyTorch on `ranks` processes (gloo) from the .npy files in `directory`.

    spec: widths, batch, steps, lr, weight_decay, optimizer ("adam", "adamw", "sgd"), momentum
    (sgd), fused (Adam/AdamW), wrapping (a key of WRAPPINGS), threads, weights (return the final
    weights too). Returns {"loss": [...], "step_seconds": [...], "weights": {...}}: the global
    mean loss and the slowest rank's time of each step (zero_grad, forward, backward, step).
    """
    import torch.multiprocessing as mp

    result = os.path.join(directory, f"torch-{uuid.uuid4().hex}.json")
    os.environ["OMP_NUM_THREADS"] = str(spec["threads"])  # before the workers start
    mp.spawn(_torch_worker, args=(ranks, spec, directory, result), nprocs=ranks, join=True)
    with open(result) as f:
        out = json.load(f)
    os.remove(result)
    if "weights" in out:
        out["weights"] = {name: np.array(value, dtype=np.float32) for name, value in out["weights"].items()}
    return out


def _torch_worker(rank, world, spec, directory, result_path):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(spec["threads"])
    rendezvous = f"file://{result_path}.rendezvous"
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
    widths = spec["widths"]
    weights = load_weights(directory, len(widths) - 1)
    layers = []
    for i in range(len(widths) - 1):
        linear = torch.nn.Linear(widths[i], widths[i + 1])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(weights[f"layer{i}.weight"]))
            linear.bias.copy_(torch.from_numpy(weights[f"layer{i}.bias"]))
        layers.append(linear)
        if i + 2 < len(widths):
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    linears = [layer for layer in model if isinstance(layer, torch.nn.Linear)]
    model, optimizer = _wrap(torch, world, model, linears, spec)

    x = torch.from_numpy(np.load(os.path.join(directory, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(directory, "y.npy")))
    rows = x.shape[0]
    share = spec["batch"] // world
    losses, seconds = [], []
    cursor = 0
    for _ in range(spec["steps"]):
        index = [(cursor + rank * share + i) % rows for i in range(share)]
        cursor = (cursor + spec["batch"]) % rows
        inputs, targets = x[index], y[index]
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        elapsed = time.perf_counter() - start
        both = torch.tensor([float(loss.detach()), elapsed], dtype=torch.float64)
        total, slowest = both[:1].clone(), both[1:].clone()
        dist.all_reduce(total)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        losses.append(float(total) / world)
        seconds.append(float(slowest))

    out = {"loss": losses, "step_seconds": seconds}
    if spec.get("weights"):
        out["weights"] = {}
        for i, linear in enumerate(linears):
            for kind in ("weight", "bias"):
                value = getattr(linear, kind).detach()
                if hasattr(value, "full_tensor"):  # an FSDP2 shard (DTensor): every rank gathers
                    value = value.full_tensor()
                out["weights"][f"layer{i}.{kind}"] = value.numpy().tolist()
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(out, f)
    dist.barrier()  # no rank closes its connections while another may still read from them
    dist.destroy_process_group()
    _leave_without_interpreter_shutdown()


def _leave_without_interpreter_shutdown():
    """Ends a worker whose work is done without Python's shutdown.

    torch 1.13's ZeroRedundancyOptimizer keeps a reference to the process group, so the group's
    gloo threads (two workers and the transport's event loop) outlive destroy_process_group() and
    stay alive while Python shuts down. A gloo worker releases a collective's tensors only after
    it has marked the collective complete; one that the machine's load keeps off the core that
    long frees a tensor Python made while the interpreter shuts down, must take the GIL for it,
    and Python ends a thread that does with pthread_exit, whose unwinding through a noexcept
    destructor aborts the process ("terminate called without an active exception"). Everything
    this worker had to write is written and closed, so it leaves at once, as a forked process does.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _wrap(torch, world, model, linears, spec):
    """The model as PyTorch distributes it for spec["wrapping"], and its optimizer."""
    optimizer_class = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[spec["optimizer"]]
    options = {"lr": spec["lr"], "weight_decay": spec["weight_decay"]}
    if spec["optimizer"] == "sgd":
        options["momentum"] = spec["momentum"]
    if spec.get("fused"):
        options["fused"] = True
    wrapping = spec["wrapping"]
    if wrapping in ("ddp", "ddp_zero"):
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
        if wrapping == "ddp":
            return model, optimizer_class(model.parameters(), **options)
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_class, **options)
    if wrapping in ("fsdp2_keep", "fsdp2_reshard"):
        from torch.distributed.device_mesh import init_device_mesh

        fully_shard = fully_shard_function()
        mesh = init_device_mesh("cpu", (world,))
        reshard = wrapping == "fsdp2_reshard"
        for linear in linears:  # one all-gather and one reduce-scatter per layer
            fully_shard(linear, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        return model, optimizer_class(model.parameters(), **options)
    raise ValueError(f"unknown wrapping {wrapping!r}; one of {', '.join(WRAPPINGS)}")

