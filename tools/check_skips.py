#!/usr/bin/env python3
"""Counts the outcomes of a CTest run from its JUnit report and fails on a skip not allowed.

    tools/check_skips.py --allowed LIST [--tests-json FILE] [--condition NAME]... JUNIT.xml

CTest's exit status ignores skipped tests (exit 77, SKIP_RETURN_CODE; a missing program; a
fixture that failed; DISABLED), so a machine that lost what a group of tests needs (root, a loop
mount, namespaces, locked memory) would run the suite green without them. tools/zero-test writes
the report with `ctest --output-junit`, and this prints the passes, skips and failures and lists
every skip with its reason; a skip is allowed only when an entry of LIST names it.

LIST (tests/allowed-skips.txt) holds one entry per line, '#' starting a comment:

    SELECTOR [when:CONDITION] REASON...

SELECTOR is a regular expression that must match a test's whole name, or label:LABEL for every
test with that CTest label (read from FILE, the output of `ctest --show-only=json-v1`).
when:CONDITION limits the entry to runs given --condition CONDITION (tools/zero-test gives
no-gpu where no CUDA device is present). REASON says why the skip is allowed.

Exit status: 0 when every skip is allowed, 1 when one is not, 2 for a bad list or report."""

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ElementTree


class ListError(Exception):
    pass


def read_allowed(path):
    """The entries of LIST as (selector, condition or None, reason, line number)."""
    entries = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            selector, rest = words[0], words[1:]
            condition = None
            if rest and rest[0].startswith("when:"):
                condition = rest.pop(0)[len("when:"):]
            if not rest or (condition is not None and not condition):
                raise ListError(f"{path}:{number}: expected SELECTOR [when:CONDITION] REASON")
            if not selector.startswith("label:"):
                try:
                    re.compile(selector)
                except re.error as error:
                    raise ListError(f"{path}:{number}: bad regular expression {selector!r}: "
                                    f"{error}") from error
            entries.append((selector, condition, " ".join(rest), number))
    return entries


def read_labels(path):
    """Test name -> its CTest labels, from `ctest --show-only=json-v1`."""
    if not path:
        return {}
    with open(path, encoding="utf-8") as report:
        tests = json.load(report).get("tests", [])
    labels = {}
    for test in tests:
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                labels[test["name"]] = list(prop.get("value", []))
    return labels


def skip_reason(case):
    """What the skip says: CTest's message and GoogleTest's reason (the line after its
    "file:line: Skipped"), else the first line of the output that speaks of a skip, else its last
    line; shortened."""
    skipped = case.find("skipped")
    message = skipped.get("message", "") if skipped is not None else case.get("status", "")
    output = case.findtext("system-out") or ""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    after_skipped = [lines[i + 1] for i in range(len(lines) - 1) if lines[i].endswith(": Skipped")]
    said = next(iter(after_skipped), None) or next(
        (line for line in lines if re.search(r"skip|not built|no cuda", line, re.I)),
        lines[-1] if lines else "")
    reason = f"{message}: {said}" if said else message
    return reason if len(reason) <= 160 else reason[:157] + "..."


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allowed", required=True, help="the allow-list (tests/allowed-skips.txt)")
    parser.add_argument("--tests-json", help="`ctest --show-only=json-v1`, for label: entries")
    parser.add_argument("--condition", action="append", default=[],
                        help="a condition that holds in this run (when:NAME entries)")
    parser.add_argument("junit", help="CTest's JUnit report (ctest --output-junit)")
    args = parser.parse_args()
    try:
        entries = read_allowed(args.allowed)
        labels = read_labels(args.tests_json)
        cases = ElementTree.parse(args.junit).getroot().iter("testcase")
    except (OSError, ListError, ElementTree.ParseError, json.JSONDecodeError) as error:
        print(f"check_skips: {error}", file=sys.stderr)
        return 2

    def allowing(name):
        for selector, condition, reason, number in entries:
            if condition is not None and condition not in args.condition:
                continue
            if selector.startswith("label:"):
                if selector[len("label:"):] in labels.get(name, []):
                    return f"{selector}: {reason}"
            elif re.fullmatch(selector, name):
                return f"{args.allowed}:{number}: {reason}"
        return None

    passed, failed, allowed, refused = 0, 0, [], []
    for case in cases:
        name, status = case.get("name", "?"), case.get("status", "")
        if status == "run":
            passed += 1
        elif status in ("notrun", "disabled"):
            why = allowing(name)
            if why is None:
                refused.append(f"{name}: {skip_reason(case)}")
            else:
                allowed.append(f"{name} ({why})")
        else:
            failed += 1
    skipped = len(allowed) + len(refused)
    print(f"check_skips: {passed} passed, {skipped} skipped ({len(allowed)} allowed, "
          f"{len(refused)} not), {failed} failed, of {passed + skipped + failed} tests")
    for line in allowed:
        print(f"  skipped, allowed: {line}")
    for line in refused:
        print(f"  SKIPPED, NOT ALLOWED: {line}")
    if refused:
        print(f"check_skips: {len(refused)} test(s) skipped that {args.allowed} does not allow: "
              "they did not run here. Give the machine what they need (their output says what), "
              "or, if the skip is right for every run, add an entry with its reason.",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
