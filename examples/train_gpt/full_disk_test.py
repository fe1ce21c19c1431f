#!/usr/bin/env python3
"""train_gpt --save-npy and --json on a full file system: a clear error that names the path and
the system's reason, and no partial file under a final name (every .npy left there loads whole).
Mounts a 256 KiB tmpfs for the test; skipped (exit 77) where mounting is not allowed."""

import glob
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    train_gpt = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        full = os.path.join(tmp, "full")
        os.makedirs(full)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", full],
                          capture_output=True).returncode != 0:
            print("skipped: cannot mount a small tmpfs here (needs root)")
            sys.exit(77)
        try:
            for flag, target in (("--save-npy", os.path.join(full, "weights")),
                                 ("--json", os.path.join(full, "run.json"))):
                if flag == "--json":  # fill the file system first
                    with open(os.path.join(full, "filler"), "wb") as f:
                        try:
                            f.write(b"\0" * (1 << 20))
                        except OSError:
                            pass
                done = subprocess.run([train_gpt, "--steps", "1", "--layers", "2", "--embd", "64",
                                       "--seq", "16", "--batch", "2", flag, target],
                                      capture_output=True, text=True)
                if done.returncode == 0:
                    sys.exit(f"{flag}: train_gpt succeeded on a full file system")
                if "No space left on device" not in done.stderr or target not in done.stderr:
                    sys.exit(f"{flag}: the error does not name the path and the reason:\n"
                             f"{done.stderr}")
                partial = glob.glob(os.path.join(full, "**", "*.partial"), recursive=True)
                if partial:
                    sys.exit(f"{flag}: partial files left behind: {partial}")
                for name in glob.glob(os.path.join(full, "**", "*.npy"), recursive=True):
                    np.load(name)  # whole, or not there at all
                if flag == "--json" and os.path.exists(target):
                    sys.exit("--json: a file was left under the final name")
                print(f"{flag}: refused with: {done.stderr.strip().splitlines()[-1]}")
        finally:
            subprocess.run(["umount", full])
    print("no partial file")


if __name__ == "__main__":
    main()
