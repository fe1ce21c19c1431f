"""What the GPU check's training scripts share (tools/gpu_train_mlp.py, tools/gpu_train_gpt.py):
their report lines, a whole run of a program whose JSON they read, and the gap between two loss
curves. Only the standard library."""
import json
import os
import subprocess


class Report:
    """The lines a script prints: "correctness NAME: ok|FAILED (...)", whose failures fail the
    script, and free lines ("result ...", "target ...")."""

    def __init__(self):
        self.failed = False

    def line(self, text):
        print(text, flush=True)

    def verdict(self, name, ok, detail):
        self.failed |= not ok
        self.line(f"correctness {name}: {'ok' if ok else 'FAILED'} ({detail})")

    def run_json(self, program, tmp, name, flags, ranks=1, timeout=120, unavailable=None):
        """Runs `program` with `flags` and `--json`, under mpirun for several ranks; returns its
        JSON, or None, with the output shown, if it failed: a run that crashes or hangs fails the
        check, not only the comparisons it would have fed. Its output stays in tmp/NAME.out.
        `unavailable`: text in the output of a run the machine cannot make (its kernel refusing
        io_uring, say), which then prints a "skipped" line instead of failing."""
        out = os.path.join(tmp, name + ".json")
        command = [program, *flags, "--json", out]
        if ranks > 1:
            command = ["mpirun", "--oversubscribe", "-np", str(ranks), *command]
        # zero-gpu-check runs Python with the machine's libraries; the packed programs need the
        # pack's.
        env = dict(os.environ)
        if "ZERO_GPU_PACK_LD_LIBRARY_PATH" in env:
            env["LD_LIBRARY_PATH"] = env["ZERO_GPU_PACK_LD_LIBRARY_PATH"]
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            self.verdict(name, False, f"timed out after {timeout} s: {' '.join(command)}")
            return None
        with open(os.path.join(tmp, name + ".out"), "w") as f:
            f.write(run.stdout + run.stderr)
        if run.returncode != 0 and unavailable and unavailable in run.stdout + run.stderr:
            self.line(f"result {name}: skipped, this machine cannot run it ({unavailable})")
            return None
        if run.returncode != 0 or not os.path.exists(out):
            self.verdict(name, False, f"exit {run.returncode}: {' '.join(command)}")
            print((run.stdout + run.stderr)[-3000:])
            return None
        with open(out) as f:
            return json.load(f)


def relative_gap(a, b):
    """The largest relative difference of two loss curves; infinite when their lengths differ or
    a loss is not finite (null in the JSON), so that any bound fails."""
    if len(a) != len(b) or None in a or None in b:
        return float("inf")
    return max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in zip(a, b))
