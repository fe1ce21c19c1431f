#!/usr/bin/env python3
"""Code shown in docs/ cannot rot: a Markdown code block right after a line

    <!-- snippet: path/to/file.cpp#name -->

must equal the region of that file between `// example-begin name` and `// example-end name`
(with the region's common indentation removed). Those files are compiled, and run, by the build.

    check_doc_snippets.py REPO_ROOT
"""
import pathlib
import re
import sys
import textwrap


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    pattern = re.compile(r"<!-- snippet: ([^#\s]+)#(\S+) -->\n```[a-z+]*\n(.*?)```", re.S)
    checked, failures = 0, []
    for doc in sorted(list(root.glob("docs/*.md")) + [root / "README.md"]):
        for path, name, shown in pattern.findall(doc.read_text()):
            source = root / path
            if not source.exists():
                failures.append(f"{doc}: snippet source {path} does not exist")
                continue
            text = source.read_text()
            match = re.search(rf"// example-begin {re.escape(name)}\n(.*?)[ ]*// example-end {re.escape(name)}\n", text, re.S)
            if not match:
                failures.append(f"{doc}: {path} has no example region '{name}'")
                continue
            expected = textwrap.dedent(match.group(1))
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
