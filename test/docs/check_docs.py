#!/usr/bin/env python3
"""Check that the committed generated docs are up to date.

The build regenerates the dialect and pass references (add_mlir_doc) into
BUILD/docs/{dialects,passes}; `make docs` copies them into docs/. This
compares the two trees byte for byte: a file that differs, is missing from
docs/, or is in docs/ but no longer generated fails the check with a unified
diff and "run make docs".

Usage: check_docs.py GENERATED_DIR COMMITTED_DIR SUBDIR...
"""
import difflib
import os
import sys


def files_under(root):
    out = set()
    for dirpath, _, names in os.walk(root):
        for n in names:
            out.add(os.path.relpath(os.path.join(dirpath, n), root))
    return out


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    generated, committed, subdirs = argv[1], argv[2], argv[3:]
    stale = []
    for sub in subdirs:
        gen_root = os.path.join(generated, sub)
        com_root = os.path.join(committed, sub)
        if not os.path.isdir(gen_root):
            print(f"error: {gen_root} does not exist (build the tessera-docs "
                  "target)", file=sys.stderr)
            return 2
        gen, com = files_under(gen_root), files_under(com_root)
        for rel in sorted(gen | com):
            g, c = os.path.join(gen_root, rel), os.path.join(com_root, rel)
            name = os.path.join(sub, rel)
            if rel not in com:
                stale.append(name)
                print(f"docs/{name}: missing (generated as {g})")
                continue
            if rel not in gen:
                stale.append(name)
                print(f"docs/{name}: no longer generated")
                continue
            with open(g, "rb") as f:
                gb = f.read()
            with open(c, "rb") as f:
                cb = f.read()
            if gb == cb:
                continue
            stale.append(name)
            print(f"docs/{name}: differs from {g}")
            diff = difflib.unified_diff(
                cb.decode("utf-8", "replace").splitlines(keepends=True),
                gb.decode("utf-8", "replace").splitlines(keepends=True),
                fromfile=f"docs/{name} (committed)",
                tofile=f"{g} (generated)")
            sys.stdout.writelines(diff)
    if stale:
        print(f"FAIL: {len(stale)} generated doc(s) out of date: run make docs")
        return 1
    print(f"OK: docs/{{{','.join(subdirs)}}} match the generated references")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
