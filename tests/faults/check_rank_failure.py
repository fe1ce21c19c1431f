#!/usr/bin/env python3
"""Runs rank_failure under mpirun and checks how the job ends when one rank fails.

  check_rank_failure.py --launcher "mpirun -np N ..." --ranks N --binary PATH
                        --fault kill|throw|leave|exit --where reduction|gather|update|finish
                        --stage S
                        [--recovery]

The failing rank is rank 2, or the last one with fewer than 3 ranks. Without --recovery, mpirun
ends the job: the test wants a non-zero exit, mpirun naming the failed rank, and every other rank
saying which collective it was in when terminated. With --recovery (mpirun --enable-recovery: the
launcher leaves the survivors running) each survivor must find out by itself, naming the collective
and the lost peer. Either way the job must end within ZERO_TIMEOUT_S + 10 s.

`leave` is the error handled as most programs do (reported, then main returns 1): no rank calls
MPI_Abort and the process stays alive, so the library must end the job itself. `exit` reports it
and calls exit(1), which destroys no communicator (the library's exit handler speaks for them).
The test wants every rank gone within 10 s of the error (ZERO_TIMEOUT_S far above that), the failing rank's
message printed, and a survivor naming the rank that left and that message. With `--where finish`
the error comes after the last step: the survivors must finish in order and say so (no collective
free may wait for the rank that unwinds), within the same 10 s.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

LEAVE_SECONDS = 10  # the job must end this soon after an error handled by returning from main
# The collectives the survivors wait in, by where rank 2 failed.
WAITING_IN = {
    "reduction": r"(reduce_scatter|all_reduce)\(",
    "gather": r"all_gather\(",
    "update": r"all_gather\(",
    "finish": None,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launcher", required=True)
    p.add_argument("--binary", required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--fault", choices=["kill", "throw", "leave", "exit"], required=True)
    p.add_argument("--where", choices=list(WAITING_IN), required=True)
    p.add_argument("--stage", default="2")
    p.add_argument("--recovery", action="store_true")
    args = p.parse_args()
    ranks = args.ranks
    victim = min(2, ranks - 1)

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
    end = time.monotonic()
    seconds = end - start
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
    survivors = [r for r in range(ranks) if r != victim]
    finished = set(int(r) for r in re.findall(r"rank (\d+): finished without a failure", out))
    if args.where == "finish":
        if finished != set(survivors):
            problems.append(f"ranks {sorted(set(survivors) - finished)} did not finish in order")
    elif finished:
        problems.append("a rank finished training although its peer failed")
    injected = re.search(rf"injecting a {'SIGKILL' if args.fault == 'kill' else 'throw'} during "
                         rf"the {args.where} of step \d+ at monotonic ([0-9.]+)", out)
    if not injected:
        problems.append("the fault was not injected where asked")
    waiting = WAITING_IN[args.where]
    if args.fault in ("leave", "exit"):
        ended_after = end - float(injected.group(1)) if injected else float("inf")
        print(f"the job ended {ended_after:.1f} s after the error")
        if ended_after > LEAVE_SECONDS:
            problems.append(f"the job ended {ended_after:.1f} s after the error, more than "
                            f"{LEAVE_SECONDS} s")
        if run.returncode == 0:
            problems.append("mpirun exited 0")
        message = f"a bad input seen on rank {victim} only"
        if f"rank {victim} of {ranks} failed: zero: {message}" not in out:
            problems.append("the failing rank did not report its error")
        if args.where == "finish":  # nobody waits for the failing rank: nobody names it
            if problems:
                sys.exit("FAIL: " + "; ".join(problems))
            print("PASS")
            return
        left = (rf"on rank (\d+) of {ranks} cannot complete: rank {victim} \(world rank {victim}, "
                rf"pid \d+ on host [^)]*\) left after \d+ operations and will not take part; the "
                rf"last error zero raised there: {re.escape(message)}")
        named = {int(m) for m in re.findall(left, out)}
        for r in survivors:
            terminated = rf"zero: rank {r} of {ranks} terminated by signal 15"
            if r not in named and not re.search(terminated, out):
                problems.append(f"rank {r} neither named the rank that left nor was terminated")
        if not named:
            problems.append(f"no survivor named rank {victim} and its error")
        if problems:
            sys.exit("FAIL: " + "; ".join(problems))
        print("PASS")
        return
    if args.recovery:
        # The survivors find out by themselves, naming the collective and the lost peer (rank 2's
        # process is gone; one that noticed first and aborted may be gone too when another looks).
        # The first to notice ends the job, so a slower survivor may instead be terminated by
        # mpirun: then it says which collective it was in. At least one must name the lost peer.
        named = 0
        for r in survivors:
            lost = (rf"zero: {waiting}[^\n]* on rank {r} of {ranks} cannot complete: "
                    rf"peers? (rank \d \([^)]*\), )*rank {victim} \(world rank {victim}, "
                    rf"pid \d+ on host [^)]*\)[^\n]* gone")
            terminated = rf"zero: rank {r} of {ranks} terminated by signal 15 while in {waiting}"
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
            if not re.search(rf"process rank {victim} with PID \d+ on node \S+ exited on signal 9",
                             out):
                problems.append("mpirun did not name the killed rank")
        else:
            if f"rank {victim} of {ranks} failed: " not in out or \
                    f"a bad input seen on rank {victim} only" not in out:
                problems.append("the failing rank did not report its error")
        for r in survivors:
            if not re.search(rf"zero: rank {r} of {ranks} terminated by signal 15 while in "
                             rf"{waiting}", out):
                problems.append(f"rank {r} did not say which collective it was in")
    if problems:
        sys.exit("FAIL: " + "; ".join(problems))
    print("PASS")


if __name__ == "__main__":
    main()
