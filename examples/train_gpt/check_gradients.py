"""Holds gpt.hpp's forward and backward against PyTorch: for each model size, writes an initial model
(reference.py's init_npy), runs gradient_check (one C++ forward and backward pass on step 0's batch)
and the same pass in torch, and compares the mean loss and every parameter's gradient.

Each size is checked twice: at the initialisation training starts from, and with every tensor
(biases and LayerNorm weights too) pushed well away from it, since at init the attention is close
to uniform and the biases are zero, which would hide mistakes in them.

    check_gradients.py --binary build/.../gradient_check [--data README.md]

Passes when the loss's relative error is below 1e-5 and every parameter's gradient is within 1e-5
of torch's in relative L2 norm (||got - torch|| <= 1e-5 ||torch||), exits 1 otherwise. The bound is
relative to each tensor's own norm, so a tensor whose true gradients are all tiny cannot pass with
zeros (its relative error would be 1); the worst measured is about 1e-6 (docs/activation-checkpointing.md).
A tensor whose torch gradient is exactly zero must come back exactly zero.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

SIZES = [  # layers, heads, embd, seq, batch
    (2, 2, 32, 16, 3),
    (3, 4, 64, 32, 2),
]
LOSS_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-5  # relative L2 norm, per tensor


def perturb(directory, layers, embd, seq, seed):
    """Adds noise to every tensor in `directory`: N(0, 0.1^2) to vectors, N(0, 1/fan_in) to
    matrices, so that attention scores and biases matter."""
    rng = np.random.default_rng(seed)
    for name, shape in reference.parameter_shapes(layers, embd, seq).items():
        path = os.path.join(directory, name + ".npy")
        scale = 0.1 if len(shape) == 1 else 1 / np.sqrt(shape[1])
        value = np.load(path) + rng.normal(0.0, scale, shape)
        np.save(path, value.astype(np.float32))


def torch_gradients(directory, data, layers, heads, embd, seq, batch):
    model = reference.GPT(layers, heads, embd, seq)
    reference.load_npy(model, directory)
    inputs, targets = reference.batch(data, 0, batch, seq)
    _, loss = model(inputs.long(), targets)
    loss.backward()
    gradients = {name: model.get_parameter(name).grad.numpy()
                 for name in reference.parameter_shapes(layers, embd, seq)}
    return loss.item(), gradients


def check(binary, data_path, size, perturbed, scale_gradient=None):
    layers, heads, embd, seq, batch = size
    with open(data_path, "rb") as f:
        data = f.read()
    with tempfile.TemporaryDirectory() as init, tempfile.TemporaryDirectory() as out:
        reference.init_npy(init, layers, heads, embd, seq, seed=1)
        if perturbed:
            perturb(init, layers, embd, seq, seed=2)
        run = subprocess.run(
            [binary, "--layers", str(layers), "--heads", str(heads), "--embd", str(embd),
             "--seq", str(seq), "--batch", str(batch), "--data", data_path, "--init-npy", init,
             "--out", out], check=True, capture_output=True, text=True)
        cpp_loss = float(run.stdout.split("loss ")[1].split()[0])
        torch_loss, expected = torch_gradients(init, data, layers, heads, embd, seq, batch)
        loss_error = abs(cpp_loss - torch_loss) / abs(torch_loss)
        worst_name, worst_ratio, worst_error = None, 0.0, 0.0
        for name, reference_gradient in expected.items():
            got = np.load(os.path.join(out, name + ".npy"))
            if scale_gradient and scale_gradient[0] == name:
                got = got * scale_gradient[1]
            want = reference_gradient.astype(np.float64)
            error = float(np.linalg.norm(got.astype(np.float64) - want))
            norm = float(np.linalg.norm(want))
            relative = error / norm if norm > 0 else (0.0 if error == 0 else np.inf)
            if relative / GRADIENT_TOLERANCE >= worst_ratio:
                worst_name, worst_ratio, worst_error = name, relative / GRADIENT_TOLERANCE, relative
    label = f"L={layers} H={heads} C={embd} T={seq} B={batch} {'perturbed' if perturbed else 'init'}"
    ok = loss_error < LOSS_TOLERANCE and worst_ratio < 1
    print(f"{'ok  ' if ok else 'FAIL'} {label}: loss {cpp_loss:.7f} vs torch {torch_loss:.7f} "
          f"(relative error {loss_error:.2e}); worst gradient {worst_name}: relative L2 error "
          f"{worst_error:.2e} = {worst_ratio:.3f} of the tolerance")
    return ok


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="the gradient_check program")
    parser.add_argument("--data", default=os.path.join(here, "..", "..", "README.md"))
    parser.add_argument("--size", action="append", metavar="L,H,C,T,B",
                        help="layers, heads, embd, seq, batch to check instead of the defaults")
    parser.add_argument("--scale-gradient", metavar="NAME=F",
                        help="multiply the C++ gradient of NAME by F before comparing, to see the "
                             "check fail (a self-test of its bound)")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.size] if args.size else SIZES
    scale = None
    if args.scale_gradient:
        name, factor = args.scale_gradient.split("=")
        scale = (name, float(factor))
    results = [check(args.binary, args.data, size, perturbed, scale)
               for size in sizes for perturbed in (False, True)]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
