#!/usr/bin/env python3
"""Runs rank_failure under mpirun with 4 ranks and checks how the job ends when rank 2 fails.

  check_rank_failure.py --launcher "mpirun -np 4 ..." --binary PATH --fault kill|throw
                        --where reduction|gather|update --stage N [--recovery]

Without --recovery, mpirun ends the job: the test wants a non-zero exit, mpirun naming the failed
rank, and every other rank saying which collective it was in when terminated. With --recovery
(mpirun --enable-recovery: the launcher leaves the survivors running) each survivor must find out
by itself, naming the collective and the lost peer. Either way the job must end within
ZERO_TIMEOUT_S + 10 s.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

VICTIM = 2
RANKS = 4
# The collectives the survivors wait in, by where rank 2 failed.
WAITING_IN = {
    "reduction": r"(reduce_scatter|all_reduce)\(",
    "gather": r"all_gather\(",
    "update": r"all_gather\(",
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launcher", required=True)
    p.add_argument("--binary", required=True)
    p.add_argument("--fault", choices=["kill", "throw"], required=True)
    p.add_argument("--where", choices=list(WAITING_IN), required=True)
    p.add_argument("--stage", default="2")
    p.add_argument("--recovery", action="store_true")
    args = p.parse_args()

    timeout_s = float(os.environ.get("ZERO_TIMEOUT_S", "20"))
    command = shlex.split(args.launcher)
    if args.recovery:
        command.insert(1, "--enable-recovery")
    command += [args.binary, args.fault, args.where, args.stage]
    logs = tempfile.TemporaryDirectory(prefix="rank-failure-")
    env = dict(os.environ, RANK_FAILURE_LOG_DIR=logs.name)
    start = time.monotonic()
    try:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=timeout_s + 10 + 15, env=env)  # + 15 s: mpirun's own start
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        sys.exit(f"FAIL: the job was still running {time.monotonic() - start:.0f} s later: a hang")
    seconds = time.monotonic() - start
    # mpirun's own report, then what each rank wrote to its log (its stderr).
    out = run.stdout
    for name in sorted(os.listdir(logs.name)):
        with open(os.path.join(logs.name, name), encoding="utf-8", errors="replace") as f:
            out += f"--- {name}\n" + f.read()
    print(out)
    print(f"exit status {run.returncode} after {seconds:.1f} s")
    problems = []
    if seconds > timeout_s + 10 + 5:
        problems.append(f"took {seconds:.0f} s, more than ZERO_TIMEOUT_S + 10 (+5 to start)")
    if "finished without a failure" in out:
        problems.append("a rank finished training although its peer failed")
    if f"injecting a {'SIGKILL' if args.fault == 'kill' else 'throw'} during the {args.where}" \
            not in out:
        problems.append("the fault was not injected where asked")
    waiting = WAITING_IN[args.where]
    survivors = [r for r in range(RANKS) if r != VICTIM]
    if args.recovery:
        # The survivors find out by themselves, naming the collective and the lost peer (rank 2's
        # process is gone; one that noticed first and aborted may be gone too when another looks).
        # The first to notice ends the job, so a slower survivor may instead be terminated by
        # mpirun: then it says which collective it was in. At least one must name the lost peer.
        named = 0
        for r in survivors:
            lost = (rf"zero: {waiting}[^\n]* on rank {r} of {RANKS} cannot complete: "
                    rf"peers? (rank \d \([^)]*\), )*rank {VICTIM} \(world rank {VICTIM}, "
                    rf"pid \d+ on host [^)]*\)[^\n]* gone")
            terminated = rf"zero: rank {r} of {RANKS} terminated by signal 15 while in {waiting}"
            if re.search(lost, out):
                named += 1
            elif not re.search(terminated, out):
                problems.append(f"rank {r} named neither the lost peer nor its collective")
        if named == 0:
            problems.append("no survivor named the collective and the lost peer")
    else:
        if run.returncode == 0:
            problems.append("mpirun exited 0")
        if args.fault == "kill":
            if not re.search(rf"process rank {VICTIM} with PID \d+ on node \S+ exited on signal 9",
                             out):
                problems.append("mpirun did not name the killed rank")
        else:
            if f"rank {VICTIM} of {RANKS} failed: " not in out or \
                    f"a bad input seen on rank {VICTIM} only" not in out:
                problems.append("the failing rank did not report its error")
        for r in survivors:
            if not re.search(rf"zero: rank {r} of {RANKS} terminated by signal 15 while in "
                             rf"{waiting}", out):
                problems.append(f"rank {r} did not say which collective it was in")
    if problems:
        sys.exit("FAIL: " + "; ".join(problems))
    print("PASS")


if __name__ == "__main__":
    main()
