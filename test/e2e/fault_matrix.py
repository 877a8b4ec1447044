#!/usr/bin/python3
"""The fault matrix: one rank killed or stopped at each moment of a run.

    fault_matrix.py --build DIR [--timeout-s 1] [--plans dp2,tp2,pp2,zero3]
                    [--signals KILL,STOP] [--moments startup,forward,...]
                    [--table OUT.md] [--write-doc | --check-doc]

For every plan (examples/gpt/gpt.onnx compiled by tessera-partition, 2 ranks
each: dp2, tp2, pp2 = 1F1B over 4 micro-batches, zero3 = dp2 with ZeRO-3),
every signal (SIGKILL, SIGSTOP) and every moment, runs

    mpirun -np 2 --mca orte_enable_recovery 1 sh -c 'tessera-run PLAN ...;
        record rc and time' --collective-timeout-s 1 --steps 6 --save CKPT
        --save-interval 2 --metrics METRICS

with TESSERA_FAULT_INJECT=1:MOMENT:SIGNAL:COUNT (runtime/FaultInject.h), so
that world rank 1 raises the signal on itself at that moment: startup (#1:
just before MPI_Init; startup-after-init, not in the doc: #2, just after
it), forward (#3), backward (#3), collective (#3, counted
from the first step), send (#3: a pipeline send; pp2 only, the other plans
have no pipeline send: their rows say n/a and are not run) and checkpoint
(#2: rank 0, which writes a shard of every checkpoint, writing its shard of
the second checkpoint, its header on disk; rank 1 survives).

orte_enable_recovery makes mpirun leave the survivor running when a rank
dies (as srun without --kill-on-bad-exit does), so that Tessera's watchdog
(and its start-up timer) is what ends it: plain mpirun would end the job
itself on a kill and hide a watchdog that does not work.

Checked per case:
  * the fault fired (rank 1's "fault injection" line, with its time);
  * the survivor (rank 0; rank 1 in the checkpoint rows) exits non-zero within 3x --collective-timeout-s of
    the fault (its own exit record, written by the `sh -c` wrapper);
  * its output names the lost rank ("lost rank 1 (pid P ...)", "rank 1 (pid
    P ...) is stopped", "rank 1 (pid P) has exited" or "rank 1 is not
    running"; rank 0 in the checkpoint rows);
  * no process of the run is left once the survivor is gone (the stopped
    rank is then killed by the test, as an operator would; mpirun exits);
  * no file is half-written under its final name: the metrics file holds
    whole JSON lines only; under --save, every entry is `latest`, a complete
    iter_NNNNNNN folder (index.json present, `tessera-ckpt convert` reads
    every shard) or a temporary name (*.tmp.*); `latest` names a complete
    folder, the last one saved before the fault.

The table (plan x signal x moment: survivor status, time from the fault to
its exit, its message) is written to --table; --write-doc regenerates
docs/FaultMatrix.md from it, and --check-doc (ctest) fails when the committed
doc's rows (everything but the times) differ from what was measured, so that
the doc cannot go stale silently. Exit status 0 when every check holds.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(ROOT, "examples", "gpt", "gpt.onnx")
CORPUS = os.path.join(ROOT, "examples", "data", "corpus.u16")
DOC = os.path.join(ROOT, "docs", "FaultMatrix.md")
NP = 2
PLANS = {"dp2": ["--dp", "2"], "tp2": ["--tp", "2"],
         "pp2": ["--pp", "2", "--micro-batches", "4", "--schedule", "1f1b"],
         "zero3": ["--dp", "2", "--zero", "3"]}
# Row name -> (the hook's moment, count).
MOMENTS = {"startup": ("startup", 1), "forward": ("forward", 3),
           "backward": ("backward", 3), "collective": ("collective", 3),
           "send": ("send", 3), "checkpoint": ("checkpoint", 2)}
# Not in the doc's matrix (e2e.failure.startup runs it): just after MPI_Init,
# the other rank waiting in the watchdog's start-up all_gather.
EXTRA_MOMENTS = {"startup-after-init": ("startup", 2)}
STEPS = 6
SAVE_INTERVAL = 2
MARKER = "TESSERA_FAULT_MATRIX_TEST"


def env(marker):
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
    e.pop("TESSERA_FAULT_INJECT", None)
    e[MARKER] = marker
    return e


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def proc_env(pid):
    data = read("/proc/%d/environ" % pid, "rb")
    if data is None:
        return {}
    out = {}
    for item in data.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def state(pid):
    stat = read("/proc/%d/stat" % pid)
    if stat is None:
        return None
    return stat[stat.rfind(")") + 2]


def alive(pid):
    s = state(pid)
    return s is not None and s not in "ZXx"


def marked(marker):
    """pid -> environment of every live process carrying `marker`."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        e = proc_env(int(name))
        if e.get(MARKER) == marker and alive(int(name)):
            out[int(name)] = e
    return out


def kill_all(marker, proc):
    for pid in marked(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


CURRENT = []


def on_signal(signum, frame):
    for marker, proc in CURRENT:
        kill_all(marker, proc)
    sys.exit(128 + signum)


def normalise(line):
    """A survivor's message without what varies from run to run."""
    line = re.sub(r"^tessera-run: error: rank \d+: ", "", line)
    line = re.sub(r"\(pid \d+ on [^)]*\)", "(pid P on HOST)", line)
    line = re.sub(r"\(pid \d+\)", "(pid P)", line)
    line = re.sub(r"#\d+", "#N", line)
    line = re.sub(r"\b\d+\.\d+ s\b", "T s", line)
    return line


def names_victim(line, victim):
    return re.search(
        r"lost rank %d \(pid \d+|rank %d \(pid \d+( on [^)]*)?\) (is "
        r"stopped|has exited)|rank %d is not running" % ((victim,) * 3), line)


def check_metrics(path):
    """'' if the metrics file holds whole JSON lines only, else the problem."""
    data = read(path)
    if not data:
        return ""
    if not data.endswith("\n"):
        return "the metrics file ends in a partial line"
    for i, line in enumerate(data.splitlines()):
        try:
            json.loads(line)
        except ValueError:
            return "metrics line %d is not JSON" % (i + 1)
    return ""


def check_checkpoints(args, root, work):
    """('' or the problem, the step `latest` names or None)."""
    if not os.path.isdir(root):
        return "", None
    complete = []
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if name == "latest" or ".tmp." in name:
            continue
        m = re.fullmatch(r"iter_(\d{7})", name)
        if not m:
            return "unexpected entry '%s' in the checkpoint root" % name, None
        if not os.path.isfile(os.path.join(full, "index.json")):
            return "'%s' has no index.json" % name, None
        out = os.path.join(work, "convert.safetensors")
        r = subprocess.run([args.ckpt, "convert", full, "--to", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        if os.path.exists(out):
            os.unlink(out)
        if r.returncode != 0:
            return "'%s' does not read: %s" % (name, r.stdout.strip()), None
        complete.append(int(m.group(1)))
    latest = read(os.path.join(root, "latest"))
    if latest is None:
        return ("" if not complete else
                "complete checkpoints but no 'latest'"), None
    m = re.fullmatch(r"iter_(\d{7})\n", latest)
    if not m or int(m.group(1)) not in complete:
        return "'latest' (%r) names no complete checkpoint" % latest, None
    return "", int(m.group(1))


class Case:
    def __init__(self, plan, sig, moment):
        self.plan, self.sig, self.moment = plan, sig, moment
        self.status = None
        self.seconds = None
        self.message = ""
        self.problems = []
        self.applies = not (moment == "send" and plan != "pp2")
        # Rank 0 writes a shard of every checkpoint (of a tensor that several
        # ranks hold, the lowest rank writes it): it faults in the checkpoint
        # rows, rank 1 elsewhere.
        self.victim = 0 if moment == "checkpoint" else 1
        self.survivor = 1 - self.victim

    def row(self):
        return (self.plan, "SIG" + self.sig, self.moment,
                "n/a" if not self.applies else str(self.status),
                "n/a: no pipeline send without pp" if not self.applies
                else self.message)


def run_case(args, work, plan_file, case):
    tag = "%s.%s.%s" % (case.plan, case.sig, case.moment)
    marker = uuid.uuid4().hex
    metrics = os.path.join(work, tag + ".metrics.jsonl")
    log = os.path.join(work, tag + ".log")
    rcdir = os.path.join(work, tag + ".rc")
    ckpt = os.path.join(work, tag + ".ckpt")
    os.makedirs(rcdir)
    cmd = ["mpirun", "-np", str(NP), "--mca", "orte_enable_recovery", "1",
           "sh", "-c", '"$@"; rc=$?; echo "$rc $(date +%s.%N)" > '
           '"$RCDIR/rank.$OMPI_COMM_WORLD_RANK"; exit $rc', "sh",
           args.run, plan_file, "--data", CORPUS, "--steps", str(STEPS),
           "--log-every", "0", "--collective-timeout-s", str(args.timeout_s),
           "--metrics", metrics, "--save", ckpt, "--save-interval",
           str(SAVE_INTERVAL)]
    e = env(marker)
    e["RCDIR"] = rcdir
    hook, count = {**MOMENTS, **EXTRA_MOMENTS}[case.moment]
    e["TESSERA_FAULT_INJECT"] = "%d:%s:%s:%d" % (case.victim, hook, case.sig,
                                                 count)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env=e, start_new_session=True)
    CURRENT[:] = [(marker, proc)]
    hung = False
    try:
        deadline = time.time() + args.case_limit_s
        survivor_rec = os.path.join(rcdir, "rank.%d" % case.survivor)
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(survivor_rec):
                # The survivor is gone: end what is left (the stopped rank),
                # as an operator would; mpirun must then exit.
                time.sleep(0.1)
                for pid, pe in marked(marker).items():
                    if pe.get("OMPI_COMM_WORLD_RANK") == str(case.victim) and \
                            state(pid) in ("T", "t"):
                        os.kill(pid, signal.SIGKILL)
                end = time.time() + 10
                while time.time() < end and proc.poll() is None:
                    time.sleep(0.02)
                break
            time.sleep(0.02)
        if proc.poll() is None:
            hung = True
            kill_all(marker, proc)
        time.sleep(0.2)
        left = marked(marker)
        if left:
            kill_all(marker, proc)
        output = read(log) or ""
        fault = re.search(r"^tessera-run: fault injection: rank %d raises "
                          r"SIG%s at %s #%d \(time ([\d.]+)\)$" %
                          (case.victim, case.sig, hook, count), output, re.M)
        rec = (read(survivor_rec) or "").split()
        case.status = int(rec[0]) if rec else None
        lines = re.findall(r"^tessera-run: error: rank %d: .*$" % case.survivor,
                           output, re.M)
        case.message = normalise(lines[0]) if lines else "(none)"
        if fault and len(rec) > 1:
            case.seconds = float(rec[1]) - float(fault.group(1))
        bound = 3 * args.timeout_s
        probs = case.problems
        if not fault:
            probs.append("the fault never fired")
        if hung:
            probs.append("the run did not end within %d s" % args.case_limit_s)
        if case.status in (None, 0):
            probs.append("the survivor's exit status is %s" % case.status)
        if case.seconds is None or case.seconds > bound:
            probs.append("the survivor exited %s after the fault (bound %g s)"
                         % ("never" if case.seconds is None else
                            "%.2f s" % case.seconds, bound))
        if len(lines) != 1 or not names_victim(lines[0], case.victim):
            probs.append("the survivor's output does not name rank %d in one "
                         "line: %r" % (case.victim, lines))
        if left:
            probs.append("processes of the run left: %s" % sorted(left))
        p = check_metrics(metrics)
        if p:
            probs.append(p)
        p, latest = check_checkpoints(args, ckpt, work)
        if p:
            probs.append(p)
        if case.moment == "checkpoint" and latest != SAVE_INTERVAL:
            probs.append("'latest' names step %s, not the checkpoint before "
                         "the fault (%d)" % (latest, SAVE_INTERVAL))
        print("%-6s SIG%-4s %-10s status %-4s %6s s  %s%s" % (
            case.plan, case.sig, case.moment, case.status,
            "-" if case.seconds is None else "%.2f" % case.seconds,
            case.message, "" if not probs else "\n    FAIL: " +
            "\n    FAIL: ".join(probs)), flush=True)
        if probs:
            print("---- output ----\n%s----" % output, flush=True)
    finally:
        if proc.poll() is None:
            kill_all(marker, proc)
        CURRENT[:] = []


HEADER = """# The fault matrix

What the other ranks of a run do when one rank is killed (SIGKILL) or
stopped (SIGSTOP) at each moment of a run, for a data-parallel, a
tensor-parallel, a pipeline (1F1B, 4 micro-batches) and a ZeRO-3 plan of
`examples/gpt/gpt.onnx` on 2 ranks. Generated by
`test/e2e/fault_matrix.py --build build --write-doc`; the ctest
`e2e.failure.matrix` measures it again and fails when a row below (all but
the times) differs from what it measures.

How each case runs: `mpirun -np 2 --mca orte_enable_recovery 1 tessera-run
PLAN --collective-timeout-s {timeout} --steps 6 --save DIR --save-interval 2
--metrics FILE`, with `TESSERA_FAULT_INJECT=RANK:MOMENT:SIGNAL:COUNT` (the
test hook of `runtime/FaultInject.h`) making one rank raise the signal on
itself:

| moment | where the rank raises the signal |
|---|---|
| startup | just before `MPI_Init` (#1), the other rank waiting inside `MPI_Init`: before the start-up timer (`Watchdog.h`, "Start-up") it waited there forever |
| forward | at the start of a step's forward (#3; pipeline: the 3rd F(c, m)) |
| backward | once the step's loss is computed, before the backward (#3; pipeline: the 3rd B(c, m)) |
| collective | entering the 3rd collective after the first step began |
| send | entering the 3rd pipeline send (pp only: the other plans have none) |
| checkpoint | rank 0 (not 1: the lowest rank holding a tensor writes it, so under dp2 rank 1 writes no shard): writing its shard of the 2nd checkpoint, its header on disk and its data not |

Rank 1 faults at every other moment.

`orte_enable_recovery` leaves the survivor running when a rank dies (as
`srun` without `--kill-on-bad-exit` does), so that Tessera's watchdog, not
the launcher, is what ends it; under plain `mpirun` the launcher also ends
the job itself when a rank is killed (`test/e2e/rank_failure.py`). A stopped
rank is alive to the launcher: the test kills it once the survivor is gone,
as an operator would.

Checked in every case: the survivor exits non-zero within 3 x
`--collective-timeout-s` of the fault; its one line names the faulted rank;
no process of the run is left; the metrics file holds whole lines only; every
`iter_NNNNNNN` folder of the checkpoint root is complete (`tessera-ckpt
convert` reads it) and `latest` names one (in the checkpoint rows, the one
saved before the fault); half-written shards exist only under their
temporary folder name (`iter_NNNNNNN.tmp.PID`). In the messages, P is a pid,
HOST a host name, #N a collective's sequence number and T a time; the
times (from the faulting rank's "fault injection" line to the survivor's
exit) were measured on the 2-core development machine. The ctest compares
the rows but not the times, and takes a killed rank found as a zombie ("has
exited") for one already reaped ("is not running"): which of the two the
survivor sees depends on when the launcher reaps it.

| plan | signal | moment | exit status | time to exit (s) | message of the survivor |
|---|---|---|---|---|---|
"""


def table(cases, timeout):
    out = HEADER.replace("{timeout}", "%g" % timeout)
    for c in cases:
        plan, sig, moment, status, message = c.row()
        secs = "-" if c.seconds is None else "%.2f" % c.seconds
        out += "| %s | %s | %s | %s | %s | %s |\n" % (
            plan, sig, moment, status, secs, message.replace("|", "\\|"))
    return out


def canon(message):
    """What the doc check compares: a killed rank seen as a zombie or as
    already reaped by the launcher is one outcome."""
    return re.sub(r"rank (\d+) \(pid P\) has exited", r"rank \1 is not running",
                  message)


def doc_rows(text):
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 6 and cells[1].startswith("SIG"):
            rows.append(tuple(cells[:4]) +
                        (canon(cells[5].replace("\\|", "|")),))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--timeout-s", type=float, default=1.0)
    ap.add_argument("--plans", default="dp2,tp2,pp2,zero3")
    ap.add_argument("--signals", default="KILL,STOP")
    ap.add_argument("--moments", default=",".join(MOMENTS),
                    help="of %s" % ", ".join(list(MOMENTS) +
                                             list(EXTRA_MOMENTS)))
    ap.add_argument("--case-limit-s", type=float, default=60)
    ap.add_argument("--table", help="write the measured table here")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write-doc", action="store_true",
                   help="regenerate docs/FaultMatrix.md")
    g.add_argument("--check-doc", action="store_true",
                   help="fail when docs/FaultMatrix.md's rows differ")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tools = os.path.join(args.build, "tools")
    args.run = os.path.join(tools, "tessera-run", "tessera-run")
    args.ckpt = os.path.join(tools, "tessera-ckpt", "tessera-ckpt")
    partition = os.path.join(tools, "tessera-partition", "tessera-partition")
    plans = args.plans.split(",")
    cases = [Case(p, s, m) for p in plans for s in args.signals.split(",")
             for m in args.moments.split(",")]
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="tessera-fault-matrix-") as work:
        files = {}
        for p in plans:
            files[p] = os.path.join(work, p + ".tsr")
            cmd = [partition, MODEL, "-o", files[p]] + PLANS[p]
            print("+ " + " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        for c in cases:
            if c.applies:
                run_case(args, work, files[c.plan], c)
    print("%d cases in %.0f s" % (len(cases), time.time() - start))
    failed = ["%s SIG%s %s: %s" % (c.plan, c.sig, c.moment, "; ".join(
        c.problems)) for c in cases if c.problems]
    text = table(cases, args.timeout_s)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text)
    if args.write_doc:
        if failed:
            print("not writing %s: some cases failed" % DOC)
        else:
            with open(DOC, "w") as f:
                f.write(text)
            print("wrote " + DOC)
    if args.check_doc:
        got = doc_rows(text)
        measured = {r[:3] for r in got}
        want = [r for r in doc_rows(read(DOC) or "") if r[:3] in measured]
        if want != got:
            failed.append("docs/FaultMatrix.md is stale (regenerate it with "
                          "--write-doc):\n      committed: %s\n      "
                          "measured:  %s" % (
                              sorted(set(want) - set(got)),
                              sorted(set(got) - set(want))))
        else:
            print("docs/FaultMatrix.md: %d rows as measured" % len(got))
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
