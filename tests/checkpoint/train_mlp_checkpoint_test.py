"""Checkpoints as a user meets them, through train_mlp and zero-checkpoint, one case per run:

  resume       K steps, stop, resume in a new process, K more: the same weights, bit for bit, as
               2K steps in one go (--stage, --dtype, --ranks)
  reshard      saved at --ranks and stage 1, loaded at --load-ranks and --load-stage: the weights
               the new run starts from are the saved ones, bit for bit, and it trains on
  kill         SIGKILL at a point of a save (--point, on --rank): the previous checkpoint is
               untouched (same bytes), still the latest, verifies, and resumes to the same
               weights as a run never killed
  async        a save written in the background equals one written in place
  consolidate  inspect verifies; consolidate to .safetensors and to .npy files, read back with the
               safetensors package (numpy and PyTorch) and with a plain numpy reader, equal the
               run's own --save-npy weights; moments included with --moments; a flipped byte is
               named by inspect

Exit 77 (skipped) only where a needed package is missing, with the reason.
"""

import argparse
import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "offload"))
import train_mlp_driver as driver  # noqa: E402

try:
    import numpy as np
except ImportError:
    driver.skip("numpy is not installed (tools/install-dependencies --test)")

MODEL = ["--layers", "16,32,24,8", "--batch", "24", "--deterministic", "--no-reference-pass",
         "--data-rows", "480", "--print-every", "100"]


def run_ok(mlp, args, ranks, env=None):
    result = mlp.run(MODEL + [str(a) for a in args], ranks=ranks, env=env)
    if result.returncode != 0:
        driver.fail("train_mlp failed:\n" + result.describe())
    return result


def load_npy_dir(directory):
    return {p.name[:-4]: np.load(p) for p in sorted(Path(directory).glob("*.npy"))}


def expect_bitwise(a, b, what):
    if sorted(a) != sorted(b):
        driver.fail(f"{what}: different tensors: {sorted(a)} vs {sorted(b)}")
    for name in a:
        x, y = np.asarray(a[name], dtype=np.float32), np.asarray(b[name], dtype=np.float32)
        if x.shape != y.shape:
            driver.fail(f"{what}: {name} has shape {x.shape} vs {y.shape}")
        if not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
            worst = np.max(np.abs(x - y))
            driver.fail(f"{what}: {name} differs (largest difference {worst})")


def tree_digest(directory):
    """A digest of every file's name and bytes under a directory."""
    h = hashlib.sha256()
    for p in sorted(Path(directory).rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(directory)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def tool(args, binary):
    return subprocess.run([binary] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=120)


def read_safetensors_plainly(path):
    """The format read with numpy alone: an 8-byte little-endian header length, a JSON header,
    then the data."""
    raw = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        if entry["dtype"] != "F32":
            driver.fail(f"{name}: dtype {entry['dtype']}")
        tensors[name] = np.frombuffer(raw[base + begin:base + end], dtype="<f4").reshape(
            entry["shape"])
    return tensors


def case_resume(mlp, a, scratch):
    common = ["--stage", a.stage, "--dtype", a.dtype]
    run_ok(mlp, common + ["--steps", 6, "--save-npy", scratch / "straight"], a.ranks)
    run_ok(mlp, common + ["--steps", 3, "--save-checkpoint", scratch / "ckpt"], a.ranks)
    out = run_ok(mlp, common + ["--steps", 6, "--load-checkpoint", scratch / "ckpt",
                                "--save-npy", scratch / "resumed"], a.ranks)
    if "resumed from" not in out.stdout:
        driver.fail("the resumed run did not say it resumed:\n" + out.describe())
    expect_bitwise(load_npy_dir(scratch / "straight"), load_npy_dir(scratch / "resumed"),
                   f"stage {a.stage} {a.dtype} at {a.ranks} rank(s), resumed after 3 of 6 steps")
    print(f"resumed run equals the uninterrupted one bit for bit (stage {a.stage}, {a.dtype}, "
          f"{a.ranks} rank(s))")


def case_reshard(mlp, a, scratch):
    run_ok(mlp, ["--stage", 1, "--steps", 3, "--save-checkpoint", scratch / "ckpt"], a.ranks)
    # --steps equal to the steps done: nothing trains, --save-npy holds the loaded weights.
    run_ok(mlp, ["--stage", a.load_stage, "--steps", 3, "--load-checkpoint", scratch / "ckpt",
                 "--save-npy", scratch / "loaded"], a.load_ranks)
    r = tool(["consolidate", scratch / "ckpt", "--to", scratch / "saved"], a.zero_checkpoint)
    if r.returncode != 0:
        driver.fail("consolidate failed: " + r.stdout + r.stderr)
    expect_bitwise(load_npy_dir(scratch / "saved"), load_npy_dir(scratch / "loaded"),
                   f"saved at {a.ranks} rank(s) stage 1, loaded at {a.load_ranks} stage "
                   f"{a.load_stage}")
    out = run_ok(mlp, ["--stage", a.load_stage, "--steps", 6, "--load-checkpoint",
                       scratch / "ckpt", "--json", scratch / "run.json"], a.load_ranks)
    losses = json.loads((scratch / "run.json").read_text())["loss"]
    if len(losses) != 3 or not all(np.isfinite(losses)):
        driver.fail(f"the resharded run did not train on: {losses}\n" + out.describe())
    print(f"saved at {a.ranks} rank(s) stage 1, loaded bit for bit at {a.load_ranks} rank(s) "
          f"stage {a.load_stage}, trained on: losses {losses}")


def case_kill(mlp, a, scratch):
    ckpt = scratch / "ckpt"
    run_ok(mlp, ["--stage", 2, "--steps", 2, "--save-checkpoint", ckpt], a.ranks)
    before = tree_digest(ckpt / "step2")
    # latest-moved happens only when the latest tag is saved over: a fresh run saving step2 again
    # (the same weights, so the same bytes). The other points: a resumed run saving step4.
    again = a.point == "latest-moved"
    args = (["--steps", "2"] if again else ["--steps", "4", "--load-checkpoint", str(ckpt)])
    killed = mlp.run(MODEL + ["--stage", "2", "--save-checkpoint", str(ckpt)] + args,
                     ranks=a.ranks, env={"ZERO_CHECKPOINT_CRASH": f"{a.point}:{a.rank}"})
    if killed.returncode == 0:
        driver.fail("the run meant to be killed during its save finished:\n" + killed.describe())
    latest = (ckpt / "latest").read_text().strip()
    allowed = ["step2", ".step2.partial"] if again else ["step2"]
    if latest not in allowed:
        driver.fail(f"after a save killed at {a.point}, latest names {latest}, not {allowed}")
    if tree_digest(ckpt / latest) != before:
        driver.fail(f"after a save killed at {a.point}, the latest checkpoint's files differ")
    r = tool(["inspect", ckpt], a.zero_checkpoint)
    if r.returncode != 0 or "verified" not in r.stdout:
        driver.fail("the previous checkpoint does not verify: " + r.stdout + r.stderr)
    run_ok(mlp, ["--stage", 2, "--steps", 4, "--save-npy", scratch / "straight"], a.ranks)
    run_ok(mlp, ["--stage", 2, "--steps", 4, "--load-checkpoint", ckpt, "--save-checkpoint",
                 ckpt, "--save-npy", scratch / "resumed"], a.ranks)
    expect_bitwise(load_npy_dir(scratch / "straight"), load_npy_dir(scratch / "resumed"),
                   f"resumed after a save killed at {a.point}")
    print(f"killed at {a.point} on rank {a.rank}: step2 untouched and latest; resumed bit for bit")


def case_async(mlp, a, scratch):
    run_ok(mlp, ["--stage", 3, "--steps", 4, "--save-checkpoint", scratch / "sync"], a.ranks)
    run_ok(mlp, ["--stage", 3, "--steps", 4, "--save-every", 2, "--async-checkpoint",
                 "--save-checkpoint", scratch / "async"], a.ranks)
    for tag in ("step4",):
        for c in (scratch / "sync", scratch / "async"):
            r = tool(["consolidate", c / tag, "--to", c / "out", "--moments"], a.zero_checkpoint)
            if r.returncode != 0:
                driver.fail("consolidate failed: " + r.stdout + r.stderr)
        expect_bitwise(load_npy_dir(scratch / "sync" / "out"),
                       load_npy_dir(scratch / "async" / "out"), "asynchronous save")
    print("the asynchronous save equals the synchronous one, moments included")


def case_consolidate(mlp, a, scratch):
    ckpt = scratch / "ckpt"
    run_ok(mlp, ["--stage", 3, "--steps", 3, "--save-checkpoint", ckpt, "--save-npy",
                 scratch / "final"], a.ranks)
    r = tool(["inspect", ckpt], a.zero_checkpoint)
    if r.returncode != 0 or "verified" not in r.stdout or "Adam, step 3" not in r.stdout:
        driver.fail("inspect: " + r.stdout + r.stderr)
    weights = load_npy_dir(scratch / "final")
    out = scratch / "model.safetensors"
    r = tool(["consolidate", ckpt, "--to", out, "--moments"], a.zero_checkpoint)
    if r.returncode != 0:
        driver.fail("consolidate: " + r.stdout + r.stderr)
    plain = read_safetensors_plainly(out)
    expect_bitwise(weights, {k: v for k, v in plain.items() if k in weights}, "plain numpy reader")
    moments = sorted(k for k in plain if k not in weights)
    expected = sorted(f"{w}.{m}" for w in weights for m in ("exp_avg", "exp_avg_sq"))
    if moments != expected:
        driver.fail(f"moments: {moments} vs {expected}")
    r = tool(["consolidate", ckpt, "--to", scratch / "npy"], a.zero_checkpoint)
    expect_bitwise(weights, load_npy_dir(scratch / "npy"), "consolidated .npy files")
    # A parameter name that is not a plain file name (here from an edited manifest) must not
    # write outside the output directory; two tensors of one name must not overwrite each other.
    for bad, message in (("../escaped", "cannot be a file name in"),
                         ("layer0.bias.exp_avg", "two tensors are named 'layer0.bias.exp_avg'")):
        edited = scratch / "edited"
        shutil.rmtree(edited, ignore_errors=True)
        shutil.copytree(ckpt / "step3", edited)
        manifest = json.loads((edited / "manifest.json").read_text())
        manifest["parameters"][0]["name"] = bad
        (edited / "manifest.json").write_text(json.dumps(manifest))
        out_dir = scratch / "npy_edited"
        r = tool(["consolidate", edited, "--to", out_dir, "--moments"], a.zero_checkpoint)
        if r.returncode == 0 or message not in r.stderr:
            driver.fail(f"consolidate of a parameter named {bad!r}: exit {r.returncode}: "
                        f"{r.stdout}{r.stderr}")
        if (scratch / "escaped.npy").exists() or out_dir.exists():
            driver.fail(f"consolidate of a parameter named {bad!r} wrote files")
    # One flipped byte in a state file: inspect names the file.
    target = sorted((ckpt / "step3").glob("states.rank*.bin"))[-1]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    r = tool(["inspect", ckpt], a.zero_checkpoint)
    if r.returncode != 1 or "is corrupt" not in r.stderr or target.name not in r.stderr:
        driver.fail(f"inspect of a corrupt checkpoint: exit {r.returncode}: {r.stdout}{r.stderr}")
    try:
        from safetensors.numpy import load_file as load_numpy
        from safetensors.torch import load_file as load_torch
    except ImportError:
        driver.skip("the safetensors package is not installed (tools/install-dependencies "
                    "--test makes ~/.cache/zero/python with it); the plain reader passed")
    expect_bitwise(weights, {k: v for k, v in load_numpy(str(out)).items() if k in weights},
                   "safetensors.numpy")
    state = load_torch(str(out))
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Identity(),
                                torch.nn.Linear(32, 24), torch.nn.Identity(),
                                torch.nn.Linear(24, 8))
    renamed = {k.replace("layer0", "0").replace("layer1", "2").replace("layer2", "4"): v
               for k, v in state.items() if k in weights}
    model.load_state_dict(renamed)  # shapes as torch.nn.Linear's
    expect_bitwise(weights, {k: state[k].numpy() for k in weights}, "safetensors.torch")
    print("inspect verified; safetensors (numpy, torch, plain) and .npy equal the run's weights; "
          "a flipped byte is named")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    driver.add_arguments(parser)
    parser.add_argument("--zero-checkpoint", required=True)
    parser.add_argument("--case", required=True,
                        choices=["resume", "reshard", "kill", "async", "consolidate"])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--stage", type=int, default=2)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--load-ranks", type=int, default=1)
    parser.add_argument("--load-stage", type=int, default=3)
    parser.add_argument("--point", default="states-written")
    parser.add_argument("--rank", type=int, default=0)
    a = parser.parse_args()
    mlp = driver.TrainMlp(a.train_mlp, a.mpirun, timeout_s=240)
    with driver.ScratchDir(prefix="zero_checkpoint_test.") as scratch:
        globals()["case_" + a.case](mlp, a, Path(scratch))


if __name__ == "__main__":
    main()
