#!/usr/bin/env python3
"""Runs a test's command, echoes its output, and passes only when both its exit status and its
output are what the test expects:

    expect_output.py --matches REGEX [--fails | --status N] [--save FILE] -- COMMAND ARGS...

The output (stdout and stderr together) must match REGEX, a regular expression in which '.' also
matches a newline, as in CMake's. The status must be 0, or with --fails a status from 1 to 127
other than 77 (the program refused and said why, rather than crashing, being killed or skipping),
or with --status exactly N. With neither, a status of 77 is passed through, so that CTest's
SKIP_RETURN_CODE reports a skip; with --fails it fails the test, since a refusal was expected.
CTest's own PASS_REGULAR_EXPRESSION ignores the exit status, so a crash after the expected line
would pass."""

import argparse
import re
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matches", required=True, help="a regular expression over the output")
    parser.add_argument("--fails", action="store_true",
                        help="the command must refuse (1-127, not 77)")
    parser.add_argument("--status", type=int, help="the exact exit status the command must give")
    parser.add_argument("--save", metavar="FILE",
                        help="also write the output to FILE (for tests that read it afterwards)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = done.stdout.decode(errors="replace")
    sys.stdout.write(output)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as saved:
            saved.write(output)
    status = done.returncode
    if status == 77 and args.status is None and not args.fails:
        return 77
    problems = []
    if args.status is not None:
        if status != args.status:
            problems.append(f"exited with status {status}; expected {args.status}")
    elif args.fails:
        if not 0 < status < 128 or status == 77:
            problems.append(f"exited with status {status}; expected a refusal (1 to 127, not 77: "
                            "a skip)")
    elif status != 0:
        problems.append(f"exited with status {status}")
    if not re.search(args.matches, output, re.DOTALL):
        problems.append(f"its output does not match {args.matches!r}")
    for problem in problems:
        print(f"expect_output: {command[0]} {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
