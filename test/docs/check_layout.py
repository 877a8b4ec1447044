#!/usr/bin/env python3
"""Checks README.md's "Layout" table against the source tree.

The table must have one row per folder that holds code directly (a .cpp,
.h, .cu, .td or .def file) under the code roots (common, compiler, dialects,
passes, runtime), plus one row for every other top-level folder; and every
row must name a folder that exists. Prints each mismatch and exits 1.

The folders are those of the files git tracks (any folder when SOURCE_DIR
is not a git checkout), so build trees and venvs do not count.

usage: check_layout.py SOURCE_DIR [README]   (README: default SOURCE_DIR/README.md)
"""
import os
import re
import subprocess
import sys

CODE_ROOTS = ("common", "compiler", "dialects", "passes", "runtime")
CODE_EXTS = (".cpp", ".h", ".cu", ".cuh", ".td", ".def")


def table_rows(readme):
    text = open(readme, encoding="utf-8").read()
    start = text.find("\n## Layout\n")
    if start < 0:
        sys.exit(f"FAIL: {readme} has no '## Layout' section")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start:end].splitlines():
        m = re.match(r"^\| `([^`]+)` \|", line)
        if m:
            rows.append(m.group(1).rstrip("/"))
    return rows


def tracked_files(src):
    try:
        out = subprocess.run(["git", "-C", src, "ls-files"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [f for f in out.splitlines() if f]


def expected_folders(src):
    files = tracked_files(src)
    if files is not None:
        want = set()
        for f in files:
            parts = f.split("/")
            if len(parts) < 2 or parts[0].startswith("."):
                continue
            if parts[0] not in CODE_ROOTS:
                want.add(parts[0])
            elif f.endswith(CODE_EXTS):
                want.add(os.path.dirname(f))
        return want
    want = set()
    for top in sorted(os.listdir(src)):
        path = os.path.join(src, top)
        if top.startswith(".") or not os.path.isdir(path) or top == "build":
            continue
        if top not in CODE_ROOTS:
            want.add(top)
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            if any(f.endswith(CODE_EXTS) for f in filenames):
                want.add(os.path.relpath(dirpath, src))
    return want


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = sys.argv[1]
    readme = sys.argv[2] if len(sys.argv) == 3 else os.path.join(src, "README.md")
    rows = table_rows(readme)
    want = expected_folders(src)
    problems = []
    for r in rows:
        if not os.path.isdir(os.path.join(src, r)):
            problems.append(f"row `{r}` names no folder")
    for d in sorted(want - set(rows)):
        problems.append(f"folder {d} has no row in README.md's Layout table")
    dups = {r for r in rows if rows.count(r) > 1}
    for d in sorted(dups):
        problems.append(f"row `{d}` appears more than once")
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print(f"PASS: README.md's Layout table names the {len(rows)} folders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
