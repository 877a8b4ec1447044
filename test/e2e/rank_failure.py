#!/usr/bin/python3
"""A rank SIGKILLed mid-step: every other rank exits non-zero, nothing hangs.

    rank_failure.py --build DIR [--grids dp4,dp2xtp2,pp2xdp2]
                    [--timeout-s 2] [--bound-s 6]

For every grid, compiles examples/gpt/gpt.onnx with tessera-partition, starts
`mpirun -np 4 tessera-run PLAN --collective-timeout-s 2 --steps 100000`,
waits until training is under way (rank 0's metrics file has 3 steps), and
SIGKILLs one rank (world rank 1; found as the tessera-run process under this
mpirun whose environment holds OMPI_COMM_WORLD_RANK=1). Two launchers:

  (a) plain mpirun: mpirun itself ends the job when a rank dies. Checked:
      mpirun exits non-zero, every surviving rank is gone within --bound-s
      (3x the collective timeout) of the kill, and the output names the lost
      rank (Tessera's "lost rank 1" or mpirun's "process rank 1").
  (b) mpirun --mca orte_enable_recovery 1 (a launcher that leaves the other
      ranks running, as srun without --kill-on-bad-exit): the survivors are
      left inside an MPI collective, and only Tessera's watchdog ends them.
      Every rank runs under `sh -c 'tessera-run ...; echo $? $(date)'` so that
      its exit status and time are recorded. Checked: every survivor exits
      with status 1 within --bound-s of the kill (its own record, and /proc
      polled every 20 ms), each prints exactly one line
      "tessera-run: error: rank R: lost rank 1 (pid P on HOST) during
      collective #N (...)" with P the killed pid, and mpirun exits.

  (c) on the first grid, as (b) but the rank is stopped (SIGSTOP), not
      killed: it is alive but stuck, as a rank on another host that hangs
      looks to this one. Checked: every survivor exits with status 1 within
      --bound-s, each printing one line "tessera-run: error: rank R:
      collective #N (...) timed out after S s (--collective-timeout-s 2);
      rank 1 (pid P on HOST) is stopped; aborting" with S >= 2 and P the
      stopped pid; the stopped rank is then killed by the test.

In all, no process of the run is left afterwards (found by a marker
variable in their environment), and a hard deadline kills everything and
fails the test rather than hanging. Prints every number it checks; exit
status 0 when all hold.
"""

import argparse
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
NP = 4
VICTIM = 1
GRIDS = {"dp4": ["--dp", "4"], "dp2xtp2": ["--dp", "2", "--tp", "2"],
         "pp2xdp2": ["--pp", "2", "--dp", "2", "--micro-batches", "4"]}
MARKER = "TESSERA_RANK_FAILURE_TEST"


def env(marker):
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1")
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
    """The /proc state letter of pid, or None if it is gone."""
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


def ranks(marker):
    """World rank -> pid of the tessera-run processes carrying `marker`."""
    out = {}
    for pid, e in marked(marker).items():
        try:
            exe = os.path.basename(os.readlink("/proc/%d/exe" % pid))
        except OSError:
            continue
        if exe == "tessera-run" and "OMPI_COMM_WORLD_RANK" in e:
            out[int(e["OMPI_COMM_WORLD_RANK"])] = pid
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


class Failed(Exception):
    pass


# The run in progress, ended if this script is stopped (e.g. by ctest's
# timeout), since mpirun runs in its own session.
CURRENT = []


def on_signal(signum, frame):
    for marker, proc in CURRENT:
        kill_all(marker, proc)
    sys.exit(128 + signum)


def check(cond, what):
    print(("  ok:   " if cond else "  FAIL: ") + what, flush=True)
    if not cond:
        raise Failed(what)


def run_case(args, work, grid, plan, mode):
    recovery = mode in "bc"
    case = "%s %s" % (grid, {"a": "(a) plain mpirun, SIGKILL",
                             "b": "(b) orte_enable_recovery, SIGKILL",
                             "c": "(c) orte_enable_recovery, SIGSTOP"}[mode])
    print("== %s" % case, flush=True)
    marker = uuid.uuid4().hex
    tag = "%s.%s" % (grid, mode)
    metrics = os.path.join(work, tag + ".metrics.jsonl")
    log = os.path.join(work, tag + ".log")
    rcdir = os.path.join(work, tag + ".rc")
    os.makedirs(rcdir)
    run = [os.path.join(args.build, "tools", "tessera-run", "tessera-run"),
           plan, "--data", CORPUS, "--steps", "100000", "--log-every", "0",
           "--collective-timeout-s", str(args.timeout_s), "--metrics", metrics]
    cmd = ["mpirun", "-np", str(NP)]
    if recovery:
        cmd += ["--mca", "orte_enable_recovery", "1"]
        # Records every rank's exit status and time (the launcher does not
        # report them).
        cmd += ["sh", "-c", '"$@"; rc=$?; echo "$rc $(date +%s.%N)" > '
                '"$RCDIR/rank.$OMPI_COMM_WORLD_RANK"; exit $rc', "sh"]
    cmd += run
    print("+ " + " ".join(cmd), flush=True)
    e = env(marker)
    e["RCDIR"] = rcdir
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env=e, start_new_session=True)
    CURRENT[:] = [(marker, proc)]
    try:
        # Training under way: 3 steps in rank 0's metrics, 4 ranks found.
        deadline = time.time() + 60
        pids = {}
        while time.time() < deadline and proc.poll() is None:
            pids = ranks(marker)
            steps = (read(metrics) or "").count("\n")
            if len(pids) == NP and steps >= 3:
                break
            time.sleep(0.05)
        check(proc.poll() is None, "mpirun still running before the kill")
        check(len(pids) == NP, "found %d tessera-run ranks: %s"
              % (len(pids), sorted(pids.items())))
        survivors = {r: p for r, p in pids.items() if r != VICTIM}
        victim = pids[VICTIM]
        steps = (read(metrics) or "").count("\n")
        os.kill(victim, signal.SIGSTOP if mode == "c" else signal.SIGKILL)
        t_kill = time.time()
        print("  %s rank %d (pid %d) after %d steps" %
              ("stopped" if mode == "c" else "killed", VICTIM, victim, steps),
              flush=True)

        # Poll /proc until every survivor and mpirun are gone (hard limit).
        gone = {}
        mpirun_exit = None
        hard = t_kill + args.bound_s + 15
        while time.time() < hard:
            now = time.time()
            for r, p in survivors.items():
                if r not in gone and not alive(p):
                    gone[r] = now - t_kill
            if mpirun_exit is None and proc.poll() is not None:
                mpirun_exit = now - t_kill
            if len(gone) == len(survivors) and mode == "c" and alive(victim):
                # The survivors are gone: end the stopped rank.
                os.kill(victim, signal.SIGKILL)
            if len(gone) == len(survivors) and mpirun_exit is not None:
                break
            time.sleep(0.02)
        hung = mpirun_exit is None or len(gone) < len(survivors)
        if hung:
            kill_all(marker, proc)
        output = read(log) or ""
        for r in sorted(survivors):
            t = gone.get(r)
            check(t is not None and t <= args.bound_s,
                  "rank %d (pid %d) gone %s after the signal (bound %.1f s)" %
                  (r, survivors[r], "never" if t is None else "%.2f s" % t,
                   args.bound_s))
        check(mpirun_exit is not None and mpirun_exit <= args.bound_s + 5,
              "mpirun exited %s after the signal with status %s (bound %.1f s)"
              % ("never" if mpirun_exit is None else "%.2f s" % mpirun_exit,
                 proc.returncode, args.bound_s + 5))
        lines = {}
        for m in re.finditer(
                r"^tessera-run: error: rank (\d+): lost rank (\d+) "
                r"\(pid (\d+) on [^)]*\) during collective #(\d+) "
                r"\((.*), running ([\d.]+) s\); aborting$",
                output, re.M):
            lines.setdefault(int(m.group(1)), []).append(m)
        for r, ms in sorted(lines.items()):
            for m in ms:
                print("  rank %d: lost rank %s (pid %s) during collective #%s "
                      "(%s, running %s s)" % (r, m.group(2), m.group(3),
                                              m.group(4), m.group(5),
                                              m.group(6)))
        timeouts = {}
        for m in re.finditer(
                r"^tessera-run: error: rank (\d+): collective #(\d+) "
                r"\((.*)\) timed out after ([\d.]+) s "
                r"\(--collective-timeout-s ([\d.]+)\); (a peer is lost or "
                r"stuck|rank (\d+) \(pid (\d+) on [^)]*\) is stopped); "
                r"aborting$", output, re.M):
            timeouts.setdefault(int(m.group(1)), []).append(m)
            print("  rank %s: collective #%s (%s) timed out after %s s" %
                  (m.group(1), m.group(2), m.group(3), m.group(4)))
        if recovery:
            for r in sorted(survivors):
                rec = (read(os.path.join(rcdir, "rank.%d" % r)) or "").split()
                rc = int(rec[0]) if rec else None
                t = float(rec[1]) - t_kill if len(rec) > 1 else None
                check(rc == 1 and t is not None and t <= args.bound_s,
                      "rank %d exited with status %s, %s after the signal "
                      "(its own record)" % (r, rc, "never" if t is None
                                            else "%.2f s" % t))
                if mode == "c":
                    ms = timeouts.get(r, [])
                    check(len(ms) == 1 and not lines.get(r) and
                          float(ms[0].group(4)) >= args.timeout_s and
                          ms[0].group(7) == str(VICTIM) and
                          ms[0].group(8) == str(victim),
                          "rank %d printed one line: its collective timed "
                          "out after >= %g s; rank %d (pid %d) is stopped" %
                          (r, args.timeout_s, VICTIM, victim))
                    continue
                ms = lines.get(r, [])
                check(len(ms) == 1 and int(ms[0].group(2)) == VICTIM and
                      int(ms[0].group(3)) == victim and not timeouts.get(r),
                      "rank %d printed one line naming lost rank %d (pid %d)"
                      % (r, VICTIM, victim))
        else:
            check(proc.returncode not in (0, None),
                  "mpirun's exit status %s is non-zero" % proc.returncode)
            named = re.search(r"lost rank %d \(|process rank %d with PID %d"
                              % (VICTIM, VICTIM, victim), output)
            check(named is not None,
                  "the output names the lost rank: %r" %
                  (named.group(0) if named else None))
        time.sleep(0.2)
        left = marked(marker)
        check(not left, "no process of the run left: %s" % sorted(left))
        check(not hung, "nothing hung")
    except Failed:
        kill_all(marker, proc)
        print("---- output of %s ----\n%s" % (case, read(log) or ""))
        raise
    finally:
        if proc.poll() is None:
            kill_all(marker, proc)
        CURRENT[:] = []


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--grids", default="dp4,dp2xtp2,pp2xdp2")
    ap.add_argument("--timeout-s", type=float, default=2.0)
    ap.add_argument("--bound-s", type=float, default=6.0,
                    help="survivors must exit this soon after the signal "
                         "(3x the collective timeout)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    partition = os.path.join(args.build, "tools", "tessera-partition",
                             "tessera-partition")
    failed = []
    with tempfile.TemporaryDirectory(prefix="tessera-rank-failure-") as work:
        for grid in args.grids.split(","):
            plan = os.path.join(work, grid + ".tsr")
            cmd = [partition, MODEL, "-o", plan] + GRIDS[grid]
            print("+ " + " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            modes = "abc" if grid == args.grids.split(",")[0] else "ab"
            for mode in modes:
                try:
                    run_case(args, work, grid, plan, mode)
                except Failed as f:
                    failed.append("%s (%s): %s" % (grid, mode, f))
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
