#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz (corpus/NAME): small valid inputs and near-valid ones.

  tests/fuzz/make_corpus.py [--train-mlp BUILD/examples/train_mlp/train_mlp]

.npy files come from numpy (Debian's python3-numpy: run it with /usr/bin/python3); checkpoints
from train_mlp --save-checkpoint under mpirun, when --train-mlp names a build of it (without it,
the checkpoint corpora are left as they are). The corpora are committed; this script documents
where they came from and remakes them after a format change.
"""

import argparse
import ctypes
import io
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def corpus(name):
    path = os.path.join(HERE, "corpus", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write(directory, name, data):
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def configs():
    out = corpus("config")
    for source in ["examples/train_mlp/ds_config.json", "examples/train_mlp/ds_config_nvme.json",
                   "examples/train_gpt/ds_config.json"]:
        shutil.copy(os.path.join(ROOT, source), os.path.join(out, source.split("/")[1] + "_" +
                                                             os.path.basename(source)))
    seeds = os.path.join(ROOT, "tests/config/seed_configs")
    for name in sorted(os.listdir(seeds)):
        if name.endswith(".json"):
            shutil.copy(os.path.join(seeds, name), os.path.join(out, name))
    near = {
        "comments.json": '{ // hjson comments\n "train_batch_size": 8, /* block */ "fp16": {"enabled": true}}',
        "duplicate_key.json": '{"zero_optimization": {"stage": 1, "stage": 2}}',
        "auto.json": '{"train_micro_batch_size_per_gpu": "auto"}',
        "stage4.json": '{"zero_optimization": {"stage": 4}}',
        "deprecated.json": '{"zero_optimization": {"stage": 2, "cpu_offload": true}, "bf16": {"enabled": true}}',
        "one_cycle.json": json.dumps({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9,
                                                                               "nesterov": True}},
                                      "scheduler": {"type": "OneCycle", "params": {
                                          "cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
                                          "cycle_second_step_size": 5}}}),
        "truncated.json": '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nv',
        "array.json": "[1, 2.5e3, null, true]",
    }
    for name, text in near.items():
        write(out, name, text)


def npy_bytes(array, version=None):
    buffer = io.BytesIO()
    if version is None:
        np.save(buffer, array)
    else:
        np.lib.format.write_array(buffer, array, version=version)
    return buffer.getvalue()


def npy():
    out = corpus("npy")
    rng = np.random.default_rng(1)
    seeds = {
        "f4_vector.npy": npy_bytes(rng.standard_normal(5).astype("<f4")),
        "f4_matrix.npy": npy_bytes(rng.standard_normal((3, 4)).astype("<f4")),
        "f4_empty.npy": npy_bytes(np.zeros((0, 3), "<f4")),
        "f4_v2.npy": npy_bytes(rng.standard_normal((2, 2)).astype("<f4"), version=(2, 0)),
        "f4_nan.npy": npy_bytes(np.array([1.0, np.nan, np.inf], "<f4")),
        "f4_3d.npy": npy_bytes(np.zeros((2, 1, 2), "<f4")),
        "f4_scalar.npy": npy_bytes(np.float32(1.5)),
        "f4_fortran.npy": npy_bytes(np.asfortranarray(np.ones((2, 3), "<f4"))),
        "f4_big_endian.npy": npy_bytes(np.ones(3, ">f4")),
        "f8_vector.npy": npy_bytes(np.arange(4, dtype="<f8")),
        "i4_matrix.npy": npy_bytes(np.arange(6, dtype="<i4").reshape(2, 3)),
        "u1_vector.npy": npy_bytes(np.arange(7, dtype="u1")),
    }
    for name, data in seeds.items():
        write(out, name, data)
    write(out, "f4_truncated.npy", seeds["f4_matrix.npy"][:-5])


def flags():
    command_lines = {
        "flags_train_mlp": {
            "default.txt": "",
            "stage.txt": "--stage\n2\n--steps\n20\n--batch\n24\n--layers\n12,40,33,4",
            "config.txt": "--config\nds_config.json\n--steps\n30\n--layers\n12,40,33,4",
            "nvme.txt": "--stage\n3\n--nvme\n/tmp/swap\n--nvme-params\n--sub-group-size\n1024",
            "checkpoint.txt": "--save-checkpoint\nckpt\n--save-every\n5\n--async-checkpoint\n--load-checkpoint\nckpt",
            "numbers.txt": "--lr\n1e-3\n--clip\n1.0\n--weight-decay\n0.01\n--momentum\n0.9\n--optimizer\nsgd\n--dtype\nbf16",
            "help.txt": "--help",
            "bad.txt": "--batch\n7.5\n--layers\n3,,4",
        },
        "flags_train_gpt": {
            "default.txt": "",
            "model.txt": "--layers\n3\n--embd\n32\n--heads\n2\n--seq\n16\n--batch\n6\n--steps\n5",
            "config.txt": "--config\nds_config.json\n--checkpoint-activations\n2\n--contiguous-memory",
            "files.txt": "--data\nREADME.md\n--init-npy\nw\n--save-npy\nout\n--json\nrun.json\n--kept-inputs-nvme\n/tmp/k",
            "numbers.txt": "--lr\n1e-4\n--weight-decay\n0.1\n--optimizer\nadamw\n--dtype\nfp16\n--seed\n3",
            "help.txt": "--help",
            "bad.txt": "--embd\n30\n--heads\n4",
        },
        "flags_estimate": {
            "figure1.txt": "--params\n7.5e9\n--dp\n64",
            "device_memory.txt": "--device-memory\n32GB\n--dp\n64\n--stage\n3",
            "config.txt": "--params=1.5B\n--config\nds_config.json\n--json",
            "bytes.txt": "--params\n350M\n--optimizer-bytes\n12\n--param-bytes\n2\n--grad-bytes\n2\n--offload-optimizer\ncpu\n--offload-param\nnvme",
            "help.txt": "--help",
            "bad.txt": "--device-memory\n32",
        },
        "flags_bench_collectives": {
            "sweep.txt": "-b\n1K\n-e\n4M\n-f\n64\n-n\n2\n-w\n1\n-c\n1\n--op\nall\n--backend\nmpi",
            "types.txt": "-b\n2K\n-e\n2M\n-f\n32\n--dtype\nbfloat16\n--redop\navg\n--root\n1\n--blocking\n--json\nout.json",
            "long.txt": "--minbytes\n8\n--maxbytes\n1G\n--stepfactor\n2\n--iters\n20\n--warmup_iters\n5",
            "help.txt": "-h",
            "bad.txt": "--op\nscatter",
        },
        "flags_checkpoint": {
            "inspect.txt": "inspect\nckpt\n--tag\nstep2\n--no-verify",
            "safetensors.txt": "consolidate\nckpt\n--to\nout.safetensors\n--moments",
            "npy.txt": "consolidate\nckpt\n--to\nout",
            "help.txt": "--help",
            "bad.txt": "consolidate\nckpt",
        },
    }
    for target, seeds in command_lines.items():
        out = corpus(target)
        for name, text in seeds.items():
            write(out, name, text)


def xxh3(data):
    library = ctypes.CDLL("libxxhash.so.0")
    library.XXH3_64bits.restype = ctypes.c_uint64
    library.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return "%016x" % library.XXH3_64bits(data, len(data))


def bundle(files):
    """A checkpoint directory as fuzz_checkpoint_load reads it: "%%file NAME" before each file."""
    parts = [b"%%file " + name.encode() + b"\n" + data for name, data in files]
    return b"\n".join(parts)


def checkpoint_files(directory):
    files = [("latest", open(os.path.join(directory, "latest"), "rb").read())]
    tag = files[0][1].decode().strip()
    for name in sorted(os.listdir(os.path.join(directory, tag))):
        files.append((tag + "/" + name, open(os.path.join(directory, tag, name), "rb").read()))
    return files


def compact(manifest_text):
    return json.dumps(json.loads(manifest_text), separators=(",", ":")).encode()


def checkpoints(train_mlp):
    runs = {
        "adam_np1": ["-np", "1", train_mlp, "--layers", "3,2,2"],
        "sgd_fp16_stage3_np2": ["-np", "2", train_mlp, "--stage", "3", "--layers", "3,2,2",
                                "--dtype", "fp16", "--optimizer", "sgd"],
        "adamw_bf16_stage1_np2": ["-np", "2", train_mlp, "--stage", "1", "--layers", "3,2",
                                  "--dtype", "bf16", "--optimizer", "adamw"],
        "config_np2": ["-np", "2", train_mlp, "--config",
                       os.path.join(ROOT, "examples/train_mlp/ds_config.json"), "--layers", "3,2"],
    }
    environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       OMPI_MCA_rmaps_base_oversubscribe="1")
    manifests, loads = corpus("checkpoint_manifest"), corpus("checkpoint_load")
    with tempfile.TemporaryDirectory() as scratch:
        for name, command in runs.items():
            directory = os.path.join(scratch, name)
            subprocess.run(["mpirun"] + command + ["--steps", "2", "--batch", "4", "--save-checkpoint",
                                                   directory], check=True, env=environment,
                           stdout=subprocess.DEVNULL)
            files = checkpoint_files(directory)
            manifest = dict(files)[files[0][1].decode().strip() + "/manifest.json"]
            write(manifests, name + ".json", compact(manifest))
            compacted = [(n, compact(d) if n.endswith("manifest.json") else d) for n, d in files]
            write(loads, name + ".ckpt", bundle(compacted))
        # The first one again with 64-byte chunks, so that reads cross chunk boundaries.
        files = dict(checkpoint_files(os.path.join(scratch, "adam_np1")))
        tag = files["latest"].decode().strip()
        manifest = json.loads(files[tag + "/manifest.json"])
        for f in manifest["files"]:
            data = files[tag + "/" + f["name"]]
            f["chunk_bytes"] = 64
            f["chunks"] = [xxh3(data[i:i + 64]) for i in range(0, len(data), 64)]
        files[tag + "/manifest.json"] = json.dumps(manifest, separators=(",", ":")).encode()
        write(manifests, "adam_np1_chunks64.json", files[tag + "/manifest.json"])
        write(loads, "adam_np1_chunks64.ckpt", bundle(sorted(files.items())))
        # 8-bit records (version 2): adam_np1's moments rewritten as codes and a block scale per
        # record, as a checkpoint of 8-bit moments holds them (a real one needs a layer of 4096
        # elements, a seed larger than the fuzzer's inputs).
        files8 = dict(checkpoint_files(os.path.join(scratch, "adam_np1")))
        manifest = json.loads(files8[tag + "/manifest.json"])
        manifest["version"] = 2
        for f in manifest["files"]:
            data, out, records = files8[tag + "/" + f["name"]], bytearray(), []
            for tensor, shard_begin, count, offset in f["records"]:
                values = np.frombuffer(data[offset:offset + 4 * count], dtype="<f4")
                if tensor == 0:
                    records.append([tensor, shard_begin, count, len(out)])
                    out += values.tobytes()
                    continue
                records.append([tensor, shard_begin, count, len(out), tensor])
                out += bytes((37 * i + 11 * tensor) % 256 for i in range(count))
                blocks = (count + 2047) // 2048
                out += np.full(blocks, max(float(np.abs(values).max()), 1e-3), "<f4").tobytes()
            f["records"], f["bytes"] = records, len(out)
            f["xxh3"] = xxh3(bytes(out))
            f["chunks"] = [xxh3(bytes(out[i:i + f["chunk_bytes"]]))
                           for i in range(0, len(out), f["chunk_bytes"])]
            files8[tag + "/" + f["name"]] = bytes(out)
        files8[tag + "/manifest.json"] = json.dumps(manifest, separators=(",", ":")).encode()
        write(manifests, "adam_np1_8bit_records.json", files8[tag + "/manifest.json"])
        write(loads, "adam_np1_8bit_records.ckpt", bundle(sorted(files8.items())))
        # Near-valid: a manifest of a newer format, one whose state file is missing, and a latest
        # naming a tag that is not there.
        newer = json.loads(files[tag + "/manifest.json"])
        newer["version"] = 3
        write(manifests, "newer_version.json", json.dumps(newer))
        missing = {n: d for n, d in files.items() if not n.endswith(".bin")}
        write(loads, "missing_states.ckpt", bundle(sorted(missing.items())))
        write(loads, "latest_elsewhere.ckpt", bundle([("latest", b"step9\n")] +
                                                     sorted(files.items())[1:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-mlp", help="a train_mlp binary, for the checkpoint corpora")
    args = parser.parse_args()
    configs()
    npy()
    flags()
    if args.train_mlp:
        checkpoints(os.path.abspath(args.train_mlp))


if __name__ == "__main__":
    main()
