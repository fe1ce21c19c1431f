"""What the optimizer fixtures' writers share (make_fixtures.py, make_lamb_fixtures.py): the
format that fixture.hpp reads. One item per line, `key value...`, each case from `case NAME` to
`end`; float32 values as IEEE-754 binary32 bit patterns in hex (exact); options as `key value`
lines in key order, pairs of numbers on one line, booleans as 1 or 0."""

import os
import struct
import sys


def f32_hex(values):
    """Each value's float32 bit pattern, in hex: a list, a numpy array or a torch tensor."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    return " ".join("%08x" % struct.unpack("<I", struct.pack("<f", float(x)))[0] for x in values)


def option_lines(options):
    """`key value` for each option, in key order."""
    out = []
    for key in sorted(options):
        value = options[key]
        if isinstance(value, tuple):
            value = " ".join(repr(float(v)) for v in value)
        elif isinstance(value, bool):
            value = "1" if value else "0"
        else:
            value = repr(float(value))
        out.append("%s %s" % (key, value))
    return out


def write_fixture(name, header, cases, run_case):
    """Writes fixtures/NAME beside this file: the header lines as comments, then what
    run_case(out, index, *case) appends to the list `out` for each of `cases`."""
    out = ["# " + line for line in header]
    for index, case in enumerate(cases):
        run_case(out, index, *case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", name)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote %d cases to %s" % (len(cases), path), file=sys.stderr)
