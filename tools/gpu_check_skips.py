#!/usr/bin/env python3
"""Reads the log of one step of tools/zero-gpu-check and says whether what it skipped is allowed.

    tools/gpu_check_skips.py [--status N] [--optional] LOG
    tools/gpu_check_skips.py --list

A step skipped something when its log holds a GoogleTest skip ("[  SKIPPED ] Suite.Name (N ms)",
whose reason is the text after GoogleTest's "file:line: Skipped"), a line of a measurement program
that starts with "skipped" or says "result NAME: skipped, ...", or when it exited with 77 (--status)
without saying what it skipped. A skip is allowed when its reason matches one of ALLOWED below
(--list prints them, and the check's report shows them), or when the step is optional (--optional:
its failures do not fail the check either). Any other skip keeps the check from passing: the
machine did not run that part, whatever the reason.

Prints one line per distinct skip, "allowed<TAB>WHAT<TAB>REASON" or "not allowed<TAB>WHAT<TAB>REASON".
Exit status: 0 when every skip is allowed (or there is none), 1 when one is not, 2 for a usage error.
Needs only Python 3's standard library (the GPU machine has no more)."""

import argparse
import re
import sys

# (a regular expression searched in a skip's reason, why such a skip is no gap in the check)
ALLOWED = [
    (r"NCCL takes one rank per GPU",
     "the 2- and 3-rank runs share one GPU; the 1-rank run covers NCCL"),
    (r"needs two ranks", "the 1-rank run; the 2- and 3-rank runs cover it"),
    (r"needs [0-9.]+ GB of device memory",
     "a benchmark size past the device's free memory; the other sizes ran"),
]

ESCAPES = re.compile(r"\x1b\[[0-9;]*m")
RUN = re.compile(r"^\[ RUN      \] (\S+)")
SKIPPED_HERE = re.compile(r": Skipped$")
SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+) \(\d+ ms\)$")
# The zero test main's summary of a skip: "zero tests: skipped Suite.Name (reason)".
SUMMARY = re.compile(r"^zero tests: skipped (\S+) \((.*)\)$")
PROGRAM_SKIP = re.compile(r"^(?:result (?P<what>.+?): )?(?P<reason>skipped\b.*)$")


def skips_in(lines, status):
    """The distinct skips of a log as (what, reason), in the order they appear."""
    # The ranks of one mpirun write into one log, so a rank's "[  SKIPPED ]" line may follow
    # another rank's lines rather than its own reason. Such a skip takes the reason its test gave
    # elsewhere in the log: another rank's, or the test main's closing summary line.
    said = {}
    for line in lines:
        if (match := SUMMARY.match(line)):
            said.setdefault(match.group(1), match.group(2))
    found = []
    reason, collecting = [], False
    for line in lines:
        if RUN.match(line):
            reason, collecting = [], False
        elif SKIPPED_HERE.search(line):
            reason, collecting = [], True
        elif (match := SKIPPED.match(line)):
            name = match.group(1)
            if reason:
                said.setdefault(name, " ".join(reason))
            found.append((name, " ".join(reason) or said.get(name, "no reason given")))
            reason, collecting = [], False
        elif collecting:
            if line.strip() and not line.startswith("["):
                reason.append(line.strip())
            else:
                collecting = False
        elif (match := PROGRAM_SKIP.match(line)):
            found.append((match.group("what") or "program", match.group("reason")))
    if status == 77 and not found:
        said = [line.strip() for line in lines if line.strip()]
        found.append(("exit 77", said[-1] if said else "no reason given"))
    distinct = []
    for skip in found:
        if skip not in distinct:
            distinct.append(skip)
    return distinct


def allowed(reason):
    return any(re.search(pattern, reason) for pattern, _ in ALLOWED)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the allowed reasons and stop")
    parser.add_argument("--status", type=int, help="the step's exit status")
    parser.add_argument("--optional", action="store_true", help="an optional step: any skip goes")
    parser.add_argument("log", nargs="?", help="the step's output")
    args = parser.parse_args()
    if args.list:
        for pattern, why in ALLOWED:
            print(f"  /{pattern}/: {why}")
        print("  any skip of an optional step (perf-optional, memcheck)")
        return 0
    if not args.log:
        parser.error("give the step's log (or --list)")
    try:
        with open(args.log, encoding="utf-8", errors="replace") as log:
            lines = [ESCAPES.sub("", line.rstrip("\n")) for line in log]
    except OSError as error:
        print(f"gpu_check_skips: {error}", file=sys.stderr)
        return 2
    refused = 0
    for what, reason in skips_in(lines, args.status):
        ok = args.optional or allowed(reason)
        refused += not ok
        print(f"{'allowed' if ok else 'not allowed'}\t{what}\t{reason}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
