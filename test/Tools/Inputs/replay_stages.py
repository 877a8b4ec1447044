"""Replays every stage of a --dump-ir-after-each directory with tessera-opt.

usage: replay_stages.py TESSERA_OPT DIR

DIR/pipeline.txt has one line "NN-name: <pipeline>" per stage, printed by
the pass manager. For each, runs `tessera-opt --pass-pipeline=<pipeline>` on
the dump before it (NN-1) and compares the result with DIR/NN-name.mlir, both
printed by tessera-opt. Prints "replayed NN-name" per stage; exits 1 on the
first difference.
"""
import glob
import os
import subprocess
import sys


def main():
    opt, root = sys.argv[1], sys.argv[2]
    with open(os.path.join(root, "pipeline.txt")) as f:
        lines = [l.rstrip("\n") for l in f if l.strip()]
    if not lines:
        sys.exit("no stages in pipeline.txt")
    for line in lines:
        stage, pipeline = line.split(": ", 1)
        index = int(stage.split("-", 1)[0])
        before = [p for p in glob.glob(os.path.join(root, "%02d-*.mlir" % (index - 1)))
                  if not p.endswith(".failed.mlir")]
        if len(before) != 1:
            sys.exit("%s: no single dump before it: %s" % (stage, before))
        replayed = subprocess.run([opt, "--pass-pipeline=" + pipeline, before[0]],
                                  capture_output=True, text=True)
        if replayed.returncode != 0:
            sys.exit("%s: tessera-opt failed:\n%s" % (stage, replayed.stderr))
        expected = subprocess.run([opt, os.path.join(root, stage + ".mlir")],
                                  capture_output=True, text=True, check=True)
        if replayed.stdout != expected.stdout:
            sys.exit("%s: the replay differs from %s.mlir" % (stage, stage))
        print("replayed", stage)


if __name__ == "__main__":
    main()
