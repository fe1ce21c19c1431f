#!/usr/bin/env python3
"""Activation checkpointing and train_gpt's speed, measured in one run (ratios, not absolutes,
carry over between machines):

- peak activation memory with sqrt(L) checkpoints against the bound (2 sqrt(L) + 1) blocks' worth,
  next to the run without checkpointing (train_gpt's own count of live activation bytes);
- step time with checkpointing against the run without (goal: at most 1.4x, one extra forward);
- tokens per second of train_gpt against PyTorch's same model (reference.py), same threads and
  ranks (PyTorch on several ranks: DistributedDataParallel over gloo), at stage 0, and stage 3.

    bench/residual/train_gpt_bench.py --train-gpt build/release/examples/train_gpt/train_gpt

Prints a markdown table (docs/activation-checkpointing.md keeps one)."""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "train_gpt"))
import reference  # noqa: E402


def zero_run(args, tmp, ranks, stage, checkpoints, extra=()):
    out = os.path.join(tmp, f"zero-{ranks}-{stage}-{checkpoints}-{len(extra)}.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.cores // ranks))
    command = [args.mpirun, "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
               args.train_gpt, "--stage", str(stage), "--layers", str(args.layers),
               "--heads", str(args.heads), "--embd", str(args.embd), "--seq", str(args.seq),
               "--batch", str(args.batch), "--steps", str(args.steps), "--data", args.data,
               "--init-npy", os.path.join(tmp, "init"), "--checkpoint-activations",
               str(checkpoints), "--json", out, *extra]
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def torch_worker(rank, ranks, threads, args, init, port, result):
    try:
        torch_train(rank, ranks, threads, args, init, port, result)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which would wait
        result.put(f"torch rank {rank} failed: {error!r}")
        raise


def torch_train(rank, ranks, threads, args, init, port, result):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
    if ranks > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=ranks)
    model = reference.GPT(args.layers, args.heads, args.embd, args.seq)
    reference.load_npy(model, init)
    # gloo cannot broadcast the bool causal masks; every rank builds the same ones.
    model._ddp_params_and_buffers_to_ignore = [
        name for name, buffer in model.named_buffers() if buffer.dtype == torch.bool]
    trained = torch.nn.parallel.DistributedDataParallel(model) if ranks > 1 else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with open(args.data, "rb") as f:
        data = f.read()
    seconds = []
    for step in range(args.steps):
        start = time.perf_counter()
        inputs, targets = reference.batch(data, step, args.batch, args.seq, rank, ranks)
        _, loss = trained(inputs.long(), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - start)
    if rank == 0:
        result.put(args.batch * args.seq * (args.steps - 1) / sum(seconds[1:]))


def torch_tokens_per_second(args, init, ranks):
    import torch.multiprocessing as mp
    context = mp.get_context("spawn")
    result = context.Queue()
    port = 29500 + os.getpid() % 1000
    workers = [context.Process(target=torch_worker,
                               args=(r, ranks, args.cores // ranks, args, init, port, result))
               for r in range(ranks)]
    for w in workers:
        w.start()
    value = result.get(timeout=600)
    for w in workers:
        w.join()
    if isinstance(value, str):
        sys.exit(value)
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-gpt", required=True)
    parser.add_argument("--mpirun", default="mpirun")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--embd", type=int, default=128)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians")
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--data", default=os.path.join(ROOT, "README.md"))
    args = parser.parse_args()
    k = max(1, round(math.sqrt(args.layers)))
    # PyTorch's threads are its own (OpenMP); OpenBLAS threads on top of them fight for the cores
    # and make it 2-3x slower here, so its workers get one OpenBLAS thread, as train_gpt does.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        reference.init_npy(init, args.layers, args.heads, args.embd, args.seq, seed=1)
        runs = {}
        cases = [("zero", 1, 0, 0), ("zero", 1, 0, k), ("zero", 1, 3, 0), ("zero", 1, 3, k),
                 ("zero", 2, 0, 0), ("zero", 2, 0, k), ("zero", 2, 3, 0), ("zero", 2, 3, k),
                 ("torch", 1, 0, 0), ("torch", 2, 0, 0)]
        for _ in range(args.rounds):
            for case in cases:
                who, ranks, stage, checkpoints = case
                if who == "zero":
                    r = zero_run(args, tmp, ranks, stage, checkpoints)
                    runs.setdefault(case, []).append(r)
                else:
                    runs.setdefault(case, []).append(
                        {"tokens_per_second": torch_tokens_per_second(args, init, ranks)})

        def tps(case):
            return statistics.median(r["tokens_per_second"] for r in runs[case])

        print(f"model: {args.layers} layers, {args.heads} heads, embd {args.embd}, seq "
              f"{args.seq}, global batch {args.batch}; {args.cores} cores; medians of "
              f"{args.rounds} alternating rounds; K = {k} checkpoints\n")
        print("| ranks | stage | checkpoints | tokens/s | vs torch | step time vs K=0 | "
              "peak activations | blocks' worth | bound 2sqrt(L)+1 |")
        print("|---|---|---|---|---|---|---|---|---|")
        bound = 2 * math.sqrt(args.layers) + 1
        for ranks in (1, 2):
            t = tps(("torch", ranks, 0, 0))
            print(f"| {ranks} | torch (DDP) | - | {t:.0f} | 1.00 | | | | |")
            for stage in (0, 3):
                for checkpoints in (0, k):
                    r = runs[("zero", ranks, stage, checkpoints)][0]
                    blocks = r["peak_activation_bytes"] / r["block_bytes"]
                    ratio = tps(("zero", ranks, stage, 0)) / tps(("zero", ranks, stage, checkpoints))
                    print(f"| {ranks} | {stage} | {checkpoints} | "
                          f"{tps(('zero', ranks, stage, checkpoints)):.0f} | "
                          f"{tps(('zero', ranks, stage, checkpoints)) / t:.2f} | {ratio:.2f} | "
                          f"{r['peak_activation_bytes'] / 1e6:.1f} MB | {blocks:.1f} | "
                          f"{'' if checkpoints == 0 else ('%.1f' % bound)} |")


if __name__ == "__main__":
    main()
