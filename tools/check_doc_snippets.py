#!/usr/bin/env python3
"""Code shown in docs/ cannot rot: a Markdown code block right after a line

    <!-- snippet: path/to/file.cpp#name -->

must equal the region of that file between `// example-begin name` and `// example-end name`
(with the region's common indentation removed). Those files are compiled, and run, by the build.

    check_doc_snippets.py REPO_ROOT            check (what CTest runs)
    check_doc_snippets.py REPO_ROOT --update   rewrite the quoted blocks from their sources
"""
import pathlib
import re
import sys
import textwrap


def region(root, path, name):
    source = root / path
    if not source.exists():
        return None, f"snippet source {path} does not exist"
    text = source.read_text()
    match = re.search(rf"// example-begin {re.escape(name)}\n(.*?)[ ]*// example-end {re.escape(name)}\n", text, re.S)
    if not match:
        return None, f"{path} has no example region '{name}'"
    return textwrap.dedent(match.group(1)), None


def main():
    args = [a for a in sys.argv[1:] if a != "--update"]
    update = "--update" in sys.argv[1:]
    root = pathlib.Path(args[0] if args else ".")
    pattern = re.compile(r"(<!-- snippet: ([^#\s]+)#(\S+) -->\n```[a-z+]*\n)(.*?)```", re.S)
    checked, failures = 0, []
    for doc in sorted(list(root.glob("docs/*.md")) + [root / "README.md"]):
        if update:
            def refresh(m):
                expected, error = region(root, m.group(2), m.group(3))
                return m.group(1) + (expected if expected is not None else m.group(4)) + "```"
            doc.write_text(pattern.sub(refresh, doc.read_text()))
        for _, path, name, shown in pattern.findall(doc.read_text()):
            expected, error = region(root, path, name)
            if error:
                failures.append(f"{doc}: {error}")
                continue
            if shown != expected:
                failures.append(f"{doc}: snippet {path}#{name} differs from the source:\n--- docs\n{shown}--- source\n{expected}")
            checked += 1
    if failures:
        sys.exit("\n".join(failures))
    if checked == 0:
        sys.exit("no snippets found in docs/: the check would be vacuous")
    print(f"docs snippets: {checked} checked, all match their compiled sources")


if __name__ == "__main__":
    main()
