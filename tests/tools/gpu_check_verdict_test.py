#!/usr/bin/env python3
"""tools/zero-gpu-check's verdict on a machine without a GPU: `run` over a stand-in pack whose
nvidia-smi lists one GPU and whose steps print canned logs (gpu_check_logs/), so that what the
check concludes from skips is tested where CI runs.

    gpu_check_verdict_test.py REPOSITORY

Each case's steps, the exit status the check must give and a line its report must hold:
  - skips the check allows (NCCL at 2 ranks sharing a GPU):        0, "zero-gpu-check: passed"
  - a test that skipped the NVMe tier where io_uring is refused:    3, "NOT PASSED"
  - train_mlp's NVMe run skipped likewise (a measurement step):     3, "NOT PASSED"
  - a test binary that exits 77 while a GPU is listed:              3, "NOT PASSED"
Prints each report; exits 1 when a case is not as expected."""

import os
import re
import stat
import subprocess
import sys
import tempfile

CASES = [
    ("allowed skips", [("test", "staged.np2", "staged_2ranks_coloured.log", 0)], 0,
     r"zero-gpu-check: passed"),
    ("nvme skipped in a test", [("test", "staged", "staged_1rank_nvme_refused.log", 0),
                                ("test", "staged.np2", "staged_2ranks_coloured.log", 0)], 3,
     r"staged +passed 2, skipped 2 NOT ALLOWED.*zero-gpu-check: NOT PASSED: 1 step"),
    ("nvme skipped in train_mlp", [("test", "staged.np2", "staged_2ranks_coloured.log", 0),
                                   ("perf", "train-mlp-gpu", "train_mlp_nvme_refused.log", 0)], 3,
     r"train-mlp-gpu +ok, target FAIL \(1.595x\), a skip NOT ALLOWED.*NOT PASSED: 1 step"),
    ("exit 77 with a GPU listed", [("test", "staged.np2", "staged_2ranks_coloured.log", 0),
                                   ("test", "convert", "broken_runtime_exit77.log", 77)], 3,
     r"convert +skipped NOT ALLOWED: no CUDA device.*NOT PASSED: 1 step"),
]


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def main():
    repository = sys.argv[1]
    logs = os.path.join(repository, "tests", "tools", "gpu_check_logs")
    wrong = 0
    for name, steps, expected_status, expected in CASES:
        with tempfile.TemporaryDirectory(prefix="zero-gpu-check-test-") as scratch:
            pack = os.path.join(scratch, "pack")
            os.makedirs(os.path.join(pack, "bin"))
            executable(os.path.join(pack, "bin", "nvidia-smi"),
                       "#!/bin/sh\necho 'GPU 0: Stand-in GPU (UUID: GPU-0)'\n")
            executable(os.path.join(pack, "bin", "print_log"), '#!/bin/sh\ncat "$1"\nexit "$2"\n')
            with open(os.path.join(pack, "env.sh"), "w") as f:
                f.write('export PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/bin:$PATH"\n')
            with open(os.path.join(pack, "check-manifest"), "w") as f:
                for kind, step, log, status in steps:
                    f.write(f"{kind} 30 1 {step} print_log {os.path.join(logs, log)} {status}\n")
            env = dict(os.environ, ZERO_GPU_CHECK_PACK=pack, ZERO_GPU_CHECK_BUDGET_S="60")
            env.pop("ZERO_EXPECT_GPU", None)
            done = subprocess.run([os.path.join(repository, "tools", "zero-gpu-check"), "run"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                  timeout=120)
        report = done.stdout.decode(errors="replace")
        print(f"=== {name}: exit status {done.returncode}\n{report}")
        if done.returncode != expected_status or not re.search(expected, report, re.DOTALL):
            print(f"gpu_check_verdict_test: {name}: expected exit status {expected_status} and "
                  f"/{expected}/", file=sys.stderr)
            wrong += 1
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
