#!/usr/bin/python3
"""Two hosts: Tessera launched by mpirun and by Slurm across network namespaces.

    multinode.py --source SRC --build BUILD --bundle BUNDLE --work DIR
                 [--timeout-s 2] [--steps 8] [--skip-slurm]
                 [--write-doc | --check-doc]

Makes two test hosts, tmn-h1 and tmn-h2 (test/multinode/hosts.sh: network
namespaces on a bridge, each with its own host name), with Tessera's runtime
from the bundle (scripts/bundle.sh: BUNDLE/launch, its mpirun, orted and
tessera-run), and Slurm on them (test/multinode/slurm.sh: one slurmctld, a
slurmd per host). The plans are compiled here with BUILD's tessera-partition
for a cluster of 2 nodes x 2 ranks (DIR/cluster.json). Then:

 1. dp2 x tp2 (examples/gpt/gpt.onnx, AdamW, --steps N) on one host
    (`mpirun -np 4`; within 1e-5 of the serial run, losses and weights),
    on the two hosts under `mpirun -H tmn-h1:2,tmn-h2:2`
    (Open MPI's launcher, its plm_rsh_agent the hosts' rsh) and under
    `srun -N 2 --ntasks-per-node 2`: every step's loss equal and the
    --save-weights files byte for byte identical to the one-host run.
    --log-placement must show tp's groups inside a host, dp's across hosts,
    and the node-local ranks taken from the launcher's environment.
 2. pp2 x tp2 (1F1B, 4 micro-batches): stage 0 on tmn-h1, stage 1 on
    tmn-h2, equal to the one-host run in the same way.
 3. dp2 x tp2 with `mpirun --map-by node` (rank 0 on tmn-h1, rank 1 on
    tmn-h2, ...): the plan's node-local tp now spans hosts, and tessera-run
    must warn, naming tp.
 4. `tessera-run --bench-collectives` on one rank per host: the nccl-tests
    table of the link between the hosts.
 5. Faults, each in a run of --steps 100000 with --collective-timeout-s T
    (default 2), after it has taken 2 steps: every rank of tmn-h2 killed
    (SIGKILL), and tmn-h2 cut off (its switch port `ip link set down`),
    under mpirun, under mpirun --mca orte_enable_recovery 1 (mpirun then
    leaves the survivors to Tessera's watchdog, as srun does without
    --kill-on-bad-exit), under mpirun with TCP keepalive on its daemons'
    connections (1 s, 2 probes: it then notices a cut-off daemon), under
    srun --kill-on-bad-exit=1 and under plain srun. tmn-h1's ranks must all have exited within 3 T of the fault, and
    the job's output must name a lost rank and tmn-h2. Whether and when the
    launcher itself returned is recorded (a launcher whose daemon on the
    cut-off host is unreachable may not return: the test then ends it).

The fault table (docs/MultiNode.md) is written by --write-doc; --check-doc
(ctest) fails when the committed rows, all but the times, differ from what
was measured. Exit 0 when every check holds; 77 (ctest's skip code) with
"SKIPPED: <reason>" when the kernel or the user cannot make the hosts.
Slurm's rows are skipped, saying why, only with --skip-slurm or when
slurm.sh skips (Slurm not installed); everything it starts is stopped and the
namespaces are deleted, also on failure.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

H1, H2 = "tmn-h1", "tmn-h2"
DOC_REL = "docs/MultiNode.md"
# Open MPI's launcher notices a daemon it cannot reach only by TCP
# keepalive, after 300 + 9 x 20 s by default; these make it 1 + 2 x 1 s.
KEEPALIVE = ["--mca", "oob_tcp_keepalive_time", "1", "--mca",
             "oob_tcp_keepalive_intvl", "1", "--mca",
             "oob_tcp_keepalive_probes", "2"]


class Env:
    pass


E = Env()


def log(msg):
    print(msg, flush=True)


def mpi_env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OPENBLAS_NUM_THREADS="1",
             # A veth delivers in a softirq that, with every core spinning
             # in MPI's progress loop, waits for ksoftirqd's next time slice:
             # 5 ms per message instead of 16 us. Ranks that yield when
             # idle leave it the core (a NIC's interrupt would not wait).
             OMPI_MCA_mpi_yield_when_idle="1")
    return e


def run(argv, timeout=300, check=False, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout, env=mpi_env(), **kw)
    if check and p.returncode != 0:
        raise RuntimeError("%s failed (exit %d):\n%s" % (
            " ".join(argv), p.returncode, p.stdout[-3000:]))
    return p


def on(host, argv):
    """argv run in `host`'s namespaces."""
    return [E.hosts_sh, "exec", E.hosts_dir, host] + argv


def mpirun(spec, argv, extra=()):
    return on(H1, [E.launch, "mpirun", "--mca", "plm_rsh_agent",
                   os.path.join(E.hosts_dir, "rsh"), "-H", spec] +
              list(extra) + argv)


def srun(argv, extra=()):
    return on(H1, ["env", "SLURM_CONF=" + E.slurm_conf, "srun",
                   "--mpi=" + E.srun_mpi, "-N", "2", "--ntasks-per-node", "2"] +
              list(extra) + [E.launch] + argv)


def train_args(plan, tag, steps):
    metrics = os.path.join(E.work, tag + ".metrics.jsonl")
    weights = os.path.join(E.work, tag + ".safetensors")
    for f in (metrics, weights):
        if os.path.exists(f):
            os.remove(f)
    return (["tessera-run", plan, "--data", E.data, "--steps", str(steps),
             "--metrics", metrics, "--save-weights", weights],
            metrics, weights)


def losses(metrics):
    return [json.loads(l)["loss"] for l in open(metrics)]


# --- placement ---------------------------------------------------------------

PLACEMENT_RE = re.compile(
    r"^placement: rank (\d+) on host (\S+) \(node \d+\), local rank (\d+) "
    r"\((\w+)\), (.*)$", re.M)


def placement(out):
    """{rank: (host, local rank, source, {axis: coord})} from --log-placement."""
    got = {}
    for m in PLACEMENT_RE.finditer(out):
        coords = dict(re.findall(r"\b(\w+)=(\d+)", m.group(5)))
        got[int(m.group(1))] = (m.group(2), int(m.group(3)), m.group(4),
                                coords)
    return got


def check_placement(out, axis_local, axis_across, source):
    """Every group of `axis_local` on one host, of `axis_across` on two;
    local ranks from `source` (the launcher's variable)."""
    pl = placement(out)
    problems = []
    if sorted(pl) != [0, 1, 2, 3]:
        return ["--log-placement printed ranks %s, not 0..3" % sorted(pl)]
    for r, (host, local, src, coords) in pl.items():
        if src != source:
            problems.append("rank %d's local rank came from %s, not %s" %
                            (r, src, source))
    for axis, want_one in ((axis_local, True), (axis_across, False)):
        others = [a for a in pl[0][3] if a != axis]
        groups = {}
        for r, (host, _, _, coords) in pl.items():
            key = tuple(coords[a] for a in others)
            groups.setdefault(key, set()).add(host)
        for key, hosts in groups.items():
            if (len(hosts) == 1) != want_one:
                problems.append("%s group %s is on %s" % (axis, key,
                                                           sorted(hosts)))
    return problems


# --- equality ----------------------------------------------------------------

def start_up_race(p, metrics):
    """Whether run `p` hit Open MPI 4.1.4's start-up race under srun (about
    1 launch in 30 here): a rank's SIGSEGV inside MPI_Init, in the TCP
    transport delivering a first message before the receiving rank's
    matching layer has its handler (open-mpi/ompi#11438, #12495 are the
    same class). Said, and then retried once by the caller."""
    died_early = not os.path.exists(metrics) or os.path.getsize(metrics) == 0
    if p.returncode != 0 and died_early and "Segmentation fault" in p.stdout:
        log("    (a rank died of SIGSEGV before step 0: Open MPI's start-up "
            "race under srun; retrying once)")
        return True
    return False


def serial_gap(serial_metrics, metrics, serial_weights, weights):
    """The largest relative difference from the serial run, by the e2e
    suite's rules (test/e2e/compare.py): every step's loss, and every
    tensor's ||w - w_serial|| / ||w_serial||, the key third of each
    in_proj_bias left out (its true gradient is exactly zero, so AdamW turns
    rounding noise into updates: e2e.drop_key_bias). inf when the steps or
    tensors differ."""
    sys.path.insert(0, os.path.join(E.src, "test", "e2e"))
    import compare
    from e2e import drop_key_bias
    ok, rows = compare.compare_losses(compare.load_losses(metrics),
                                      compare.load_losses(serial_metrics),
                                      rtol=1e-5)
    worst = max((r[3] if r[3] is not None else float("inf")) for r in rows)
    ok, problems, errs = compare.compare_weights(
        drop_key_bias(compare.load_weights(weights)),
        drop_key_bias(compare.load_weights(serial_weights)), rtol=1e-5)
    if problems:
        return float("inf")
    return max([worst] + [e for e, _, _ in errs])


def equal_runs(name, plan, launchers, steps, axis_local, axis_across):
    """The one-host run, then each (label, command maker, local-rank
    variable) launcher: losses equal and weights identical."""
    results = []
    argv, m_ref, w_ref = train_args(plan, name + ".one-host", steps)
    p = run([E.launch, "mpirun", "-np", "4"] + argv, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("one-host %s failed:\n%s" % (name, p.stdout[-3000:]))
    ref = losses(m_ref)
    ref_bytes = open(w_ref, "rb").read()
    log("%s one host (mpirun -np 4): losses %s" % (
        name, " ".join("%.4f" % l for l in ref)))
    # The one-host run is itself the serial run's, within 1e-5 relative
    # (the project's equivalence rule), so the hosts' runs are too.
    argv, m_ser, w_ser = train_args(E.plans["serial"], name + ".serial",
                                    steps)
    p = run([E.launch] + argv, timeout=600)
    if p.returncode != 0:
        raise RuntimeError("serial run failed:\n%s" % p.stdout[-3000:])
    worst = serial_gap(m_ser, m_ref, w_ser, w_ref)
    log("%s one host vs serial: largest relative difference %.2e "
        "(losses and weights; at most 1e-5)" % (name, worst))
    if not worst <= 1e-5:
        return False
    for label, make, source in launchers:
        argv, m, w = train_args(plan, name + "." + label.split()[0], steps)
        cmd = make(argv + ["--log-placement"])
        t0 = time.time()
        p = run(cmd, timeout=600)
        if start_up_race(p, m):
            p = run(cmd, timeout=600)
        secs = time.time() - t0
        problems = []
        if p.returncode != 0:
            problems.append("exit %d:\n%s" % (p.returncode, p.stdout[-3000:]))
        else:
            got = losses(m)
            if got != ref:
                problems.append("losses %s differ from one host's %s" %
                                (got, ref))
            if open(w, "rb").read() != ref_bytes:
                problems.append("--save-weights differs from one host's "
                                "(bytes)")
            problems += check_placement(p.stdout, axis_local, axis_across,
                                        source)
        verdict = "equal" if not problems else "DIFFERENT"
        log("%s %s: %s (%d steps, %.1f s)%s" % (
            name, label, verdict, steps, secs,
            "".join("\n    FAIL: " + x for x in problems)))
        for line in p.stdout.splitlines():
            if line.startswith("placement:"):
                log("    " + line)
        results.append(not problems)
    return all(results)


# --- faults ------------------------------------------------------------------

def comm(pid):
    try:
        return open("/proc/%d/comm" % pid).read().strip()
    except OSError:
        return ""


def netns_pids(host):
    p = subprocess.run(["ip", "netns", "pids", host], stdout=subprocess.PIPE,
                       text=True)
    return [int(x) for x in p.stdout.split()]


def ranks_on(host):
    return [p for p in netns_pids(host) if comm(p) == "tessera-run"]


LAUNCHER_COMMS = {"tessera-run", "mpirun", "orterun", "orted", "srun",
                  "launch"}


def clean_hosts():
    """Ends what a fault case left (never the holders or Slurm's daemons)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for h in (H1, H2):
            for p in netns_pids(h):
                if comm(p) in LAUNCHER_COMMS:
                    try:
                        os.kill(p, sig)
                    except ProcessLookupError:
                        pass
        time.sleep(0.5)


def wait_slurm_idle():
    """After a fault, until both nodes are idle again (at most 60 s)."""
    for _ in range(600):
        p = subprocess.run(on(H1, ["env", "SLURM_CONF=" + E.slurm_conf,
                                   "sinfo", "-h", "-o", "%T"]),
                           stdout=subprocess.PIPE, text=True)
        states = p.stdout.split()
        if states and all(st == "idle" for st in states):
            return
        time.sleep(0.1)
    log("    (Slurm's nodes not idle 60 s after the fault: %s)" % p.stdout)


def wait_steps(metrics, n, deadline):
    while time.time() < deadline:
        if os.path.exists(metrics) and \
                sum(1 for _ in open(metrics)) >= n:
            return True
        time.sleep(0.05)
    return False


def fault_case(launcher, fault, make, timeout_s):
    """One row of the fault table (a dict)."""
    if launcher.startswith("srun"):
        wait_slurm_idle()  # a cut link earlier leaves tmn-h2 down a while
    argv, metrics, _ = train_args(E.plans["dp2tp2"], "fault", 100000)
    argv += ["--collective-timeout-s", str(timeout_s), "--log-every", "1000"]
    out_path = os.path.join(E.work, "fault.out")
    out = open(out_path, "w")
    proc = subprocess.Popen(make(argv), stdout=out, stderr=subprocess.STDOUT,
                            env=mpi_env(), start_new_session=True)
    row = {"launcher": launcher, "fault": fault}
    try:
        if not wait_steps(metrics, 2, time.time() + 120):
            row["problem"] = "the run did not reach step 2"
        else:
            inject_fault(row, proc, fault, timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        out.close()
        subprocess.run([E.hosts_sh, "link", E.hosts_dir, H2, "up"])
        clean_hosts()
        if launcher.startswith("srun"):
            wait_slurm_idle()
    text = open(out_path).read()
    row["text"] = text
    row["message"] = lost_message(text)
    return row


def inject_fault(row, proc, fault, timeout_s):
    """Applies `fault` to tmn-h2 and times the ends (into `row`)."""
    victims = ranks_on(H2)
    t0 = time.time()
    if fault == "ranks killed":
        for p in victims:
            os.kill(p, signal.SIGKILL)
    else:
        subprocess.run([E.hosts_sh, "link", E.hosts_dir, H2, "down"],
                       check=True)
    limit = 3 * timeout_s
    survivors_gone = None
    launcher_gone = None
    # Slurm declares a cut-off node failed after about 18 s.
    while time.time() - t0 < limit + 20:
        now = time.time() - t0
        if survivors_gone is None and not ranks_on(H1):
            survivors_gone = now
        if launcher_gone is None and proc.poll() is not None:
            launcher_gone = now
        if survivors_gone is not None and launcher_gone is not None:
            break
        time.sleep(0.05)
    row["survivors_s"] = survivors_gone
    row["launcher_s"] = launcher_gone
    row["launcher_rc"] = proc.returncode if launcher_gone is not None \
        else None


def lost_message(text):
    """The first line naming a lost rank on tmn-h2 (2 or 3) of each of
    tessera-run, mpirun and srun, in that order, joined by "<br>"."""
    found = {}
    for line in text.splitlines():
        # tessera-run's watchdog says "ranks 2, 3 on host tmn-h2", mpirun
        # "process rank 2 ... on node tmn-h2", srun "tmn-h2: tasks 2-3".
        if H2 in line and re.search(r"\b(ranks?|tasks?) [23]\b", line):
            found.setdefault(source_of(line), line.strip())
    return "<br>".join(found[k] for k in ("tessera-run", "mpirun", "srun")
                       if k in found)


def source_of(line):
    """Who printed `line`: tessera-run, mpirun or srun."""
    for who in ("tessera-run", "mpirun", "srun"):
        if line.lstrip().startswith(who):
            return who
    return "other"


def judge(row, timeout_s):
    problems = []
    if "problem" in row:
        return [row["problem"]]
    s = row["survivors_s"]
    if s is None or s > 3 * timeout_s:
        problems.append("tmn-h1's ranks still ran %.0f s after the fault" %
                        (3 * timeout_s) if s is None else
                        "tmn-h1's ranks exited %.1f s after the fault (> 3 x "
                        "%g s)" % (s, timeout_s))
    if not row["message"]:
        problems.append("no line names a lost rank on " + H2)
    return problems


def fmt_s(x):
    return "did not return (ended by the test)" if x is None else \
        "%.1f s" % x


def table(rows, timeout_s):
    lines = ["| launcher | fault on tmn-h2 | tmn-h1's ranks ended | "
             "launcher returned | the lines naming the lost ranks |",
             "|---|---|---|---|---|"]
    for r in rows:
        msg = r.get("message", "") or r.get("problem", "")
        msg = re.sub(r"pid \d+", "pid P", msg)
        msg = re.sub(r"PID \d+", "PID P", msg)
        msg = re.sub(r"#\d+", "#N", msg)
        msg = re.sub(r"after \d+\.\d s", "after T s", msg)
        msg = "<br>".join("`%s`" % m for m in msg.split("<br>") if m)
        lines.append("| %s | %s | %s | %s | %s |" % (
            r["launcher"], r["fault"], fmt_s(r.get("survivors_s")),
            fmt_s(r.get("launcher_s")), msg.replace("|", "\\|")))
    return lines


def doc_rows(text):
    """The rows of a table, without the timing columns."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| launcher"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            if len(cells) == 5:
                # Who named the lost ranks; the lines' details (which
                # survivor printed first, which rank mpirun saw first)
                # vary from run to run.
                said = [source_of(m.strip("`"))
                        for m in cells[4].split("<br>") if m.strip("`")]
                rows.append((cells[0], cells[1], " ".join(said)))
    return rows


# --- main ----------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--timeout-s", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--skip-slurm", action="store_true")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write-doc", action="store_true")
    g.add_argument("--check-doc", action="store_true")
    args = ap.parse_args()

    E.src = os.path.abspath(args.source)
    E.work = os.path.abspath(args.work)
    E.hosts_dir = os.path.join(E.work, "hosts")
    E.hosts_sh = os.path.join(E.src, "test", "multinode", "hosts.sh")
    E.slurm_sh = os.path.join(E.src, "test", "multinode", "slurm.sh")
    E.launch = os.path.join(os.path.abspath(args.bundle), "launch")
    E.data = os.path.join(E.src, "examples", "data", "corpus.u16")
    partition = os.path.join(os.path.abspath(args.build), "tools",
                             "tessera-partition", "tessera-partition")
    os.makedirs(E.work, exist_ok=True)
    if not os.access(E.launch, os.X_OK):
        print("FAIL: no bundle at %s (scripts/bundle.sh)" % args.bundle)
        return 1

    # The hosts' cluster: 2 nodes of 2 ranks (the figures only feed the
    # prediction; the placement is what matters here).
    cluster = os.path.join(E.work, "cluster.json")
    json.dump({"name": "tmn:2x2", "nodes": 2, "devices_per_node": 2,
               "peak_flops": {"fp32": 1e10}, "memory_bytes": 8e9,
               "intra_node": {"bandwidth": 5e9, "latency": 5e-6},
               "inter_node": {"bandwidth": 1e9, "latency": 5e-5},
               "source": "test/multinode: two network-namespace hosts"},
              open(cluster, "w"))
    model = os.path.join(E.src, "examples", "gpt", "gpt.onnx")
    E.plans = {}
    explains = {}
    E.plans["serial"] = os.path.join(E.work, "serial.tsr")
    run([partition, model, "-o", E.plans["serial"], "--optimizer", "adamw"],
        check=True)
    for name, flags in (("dp2tp2", ["--dp", "2", "--tp", "2"]),
                        ("pp2tp2", ["--pp", "2", "--tp", "2", "--schedule",
                                    "1f1b", "--micro-batches", "4"])):
        E.plans[name] = os.path.join(E.work, name + ".tsr")
        p = run([partition, model, "-o", E.plans[name], "--optimizer",
                 "adamw", "--cluster", cluster, "--explain"] + flags,
                check=True)
        explains[name] = [l for l in p.stdout.splitlines()
                          if l.startswith(("grid:", "rank order", "placement"))]
        for l in explains[name]:
            log("%s --explain: %s" % (name, l))
        across = "dp" if name == "dp2tp2" else "pp"
        want = "placement: 2 nodes x 2 ranks (--cluster): node 0 = ranks " \
            "0-1, node 1 = ranks 2-3; tp inside a node, %s across nodes" % across
        if want not in explains[name]:
            print("FAIL: %s --explain lacks '%s'" % (name, want))
            return 1

    subprocess.run([E.hosts_sh, "down", E.hosts_dir])
    up = run([E.hosts_sh, "up", E.hosts_dir, "2"])
    if up.returncode == 77:
        print(up.stdout.strip())
        E.skip_reason = up.stdout.strip()
        return 77
    if up.returncode != 0:
        print("FAIL: hosts.sh up:\n" + up.stdout)
        return 1
    log("hosts:\n" + up.stdout.rstrip())
    # hosts.sh's errors: hosts of those names exist already; no such host.
    again = run([E.hosts_sh, "up", os.path.join(E.work, "hosts-again"), "2"])
    nohost = run([E.hosts_sh, "exec", E.hosts_dir, "tmn-h9", "true"])
    for what, p, want in (
            ("a second up", again, "hosts.sh: error: namespace tmn-sw exists"),
            ("exec on tmn-h9", nohost, "hosts.sh: error: no host 'tmn-h9'")):
        if p.returncode != 1 or want not in p.stdout:
            print("FAIL: hosts.sh %s: exit %d, %r (want exit 1, %r)" % (
                what, p.returncode, p.stdout.strip(), want))
            subprocess.run([E.hosts_sh, "down", E.hosts_dir])
            return 1
    log("hosts.sh refuses a second up and an unknown host (exit 1, "
        "one line each)")
    slurm_up = False
    ok = True
    try:
        slurm_why = "--skip-slurm"
        if not args.skip_slurm:
            s = run([E.slurm_sh, "up", E.hosts_dir], timeout=180)
            if s.returncode == 0:
                slurm_up = True
                E.slurm_conf = os.path.join(E.hosts_dir, "slurm",
                                            "slurm.conf")
                E.srun_mpi = os.environ.get("TESSERA_SRUN_MPI", "pmix")
                log("slurm: " + s.stdout.strip().splitlines()[-1])
            elif s.returncode == 77:
                slurm_why = s.stdout.strip()
            else:
                print("FAIL: slurm.sh up:\n" + s.stdout[-3000:])
                return 1
        if not slurm_up:
            log("SKIPPED (Slurm's rows): " + slurm_why)
            E.pass_note = " (Slurm's rows skipped: %s)" % slurm_why

        launchers = [("mpirun -H %s:2,%s:2" % (H1, H2),
                      lambda a: mpirun("%s:2,%s:2" % (H1, H2), a),
                      "OMPI_COMM_WORLD_LOCAL_RANK")]
        if slurm_up:
            launchers.append(("srun -N 2 --ntasks-per-node 2", srun,
                              "SLURM_LOCALID"))
        ok &= equal_runs("dp2xtp2", E.plans["dp2tp2"], launchers, args.steps,
                         "tp", "dp")
        ok &= equal_runs("pp2xtp2", E.plans["pp2tp2"], launchers, args.steps,
                         "tp", "pp")

        # 3. The launcher places ranks other than the plan assumed.
        argv, _, _ = train_args(E.plans["dp2tp2"], "map-by-node", 1)
        p = run(mpirun("%s:2,%s:2" % (H1, H2), argv + ["--log-placement"],
                       ["--map-by", "node"]))
        warn = [l for l in p.stdout.splitlines()
                if "warning:" in l and " tp " in l and "spans hosts" in l]
        log("dp2xtp2 under mpirun --map-by node: exit %d; %s" % (
            p.returncode, warn[0] if warn else "NO WARNING naming tp"))
        if p.returncode != 0 or not warn:
            log(p.stdout[-3000:])
            ok = False

        # 4. The link between the hosts, as nccl-tests prints it.
        p = run(mpirun("%s:1,%s:1" % (H1, H2),
                       ["tessera-run", "--bench-collectives",
                        "--bench-max-bytes", "1048576"]))
        rows = [l for l in p.stdout.splitlines()
                if l.split()[:1] and l.split()[0] in
                ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                 "send_recv")]
        log("--bench-collectives, one rank on each host (exit %d):" %
            p.returncode)
        log("\n".join("    " + l for l in p.stdout.splitlines()
                      if l.strip()))
        if p.returncode != 0 or len(rows) != 5 * 6:
            log("FAIL: expected 5 collectives x 6 sizes (1 KiB .. 1 MiB, x4)")
            ok = False

        # 5. Faults.
        T = args.timeout_s
        cases = [("mpirun", lambda a: mpirun("%s:2,%s:2" % (H1, H2), a)),
                 ("mpirun --mca orte_enable_recovery 1",
                  lambda a: mpirun("%s:2,%s:2" % (H1, H2), a,
                                   ["--mca", "orte_enable_recovery", "1"])),
                 ("mpirun --mca oob_tcp_keepalive_time 1 (intvl 1, probes 2)",
                  lambda a: mpirun("%s:2,%s:2" % (H1, H2), a, KEEPALIVE))]
        if slurm_up:
            cases += [("srun --kill-on-bad-exit=1",
                       lambda a: srun(a, ["--kill-on-bad-exit=1"])),
                      ("srun", srun)]
        rows = []
        for launcher, make in cases:
            for fault in ("ranks killed", "link down"):
                row = fault_case(launcher, fault, make, T)
                if "problem" in row and "Segmentation fault" in row["text"]:
                    log("    (a rank died of SIGSEGV before step 2: Open "
                        "MPI's start-up race under srun; retrying once)")
                    row = fault_case(launcher, fault, make, T)
                problems = judge(row, T)
                log("fault: %s, %s on %s: tmn-h1's ranks ended %s, launcher "
                    "%s; %s%s" % (
                        launcher, fault, H2, fmt_s(row.get("survivors_s")),
                        fmt_s(row.get("launcher_s")),
                        row.get("message") or "(no line names the lost "
                        "ranks)", "".join("\n    FAIL: " + x
                                          for x in problems)))
                if problems:
                    log("    output:\n" + "\n".join(
                        "      " + l for l in row.get("text", "")
                        .splitlines()[-30:]))
                ok &= not problems
                rows.append(row)
        tab = table(rows, T)
        log("\n".join(tab))
        doc = os.path.join(E.src, DOC_REL)
        if args.write_doc:
            if not ok:
                log("not writing %s: some checks failed" % DOC_REL)
            elif not slurm_up:
                log("not writing %s: Slurm's rows were skipped" % DOC_REL)
            else:
                text = open(doc).read()
                begin, end = "<!-- fault table: begin -->", \
                    "<!-- fault table: end -->"
                i, j = text.index(begin) + len(begin), text.index(end)
                open(doc, "w").write(text[:i] + "\n" + "\n".join(tab) +
                                     "\n" + text[j:])
                log("wrote " + DOC_REL)
        if args.check_doc and slurm_up:
            want = doc_rows(open(doc).read())
            got = doc_rows("\n".join(tab))
            if sorted(want) != sorted(got):
                log("FAIL: %s is stale (regenerate: test/multinode/"
                    "multinode.py ... --write-doc):\n  committed: %s\n  "
                    "measured:  %s" % (DOC_REL,
                                       sorted(set(want) - set(got)),
                                       sorted(set(got) - set(want))))
                ok = False
    finally:
        clean_hosts()
        if slurm_up:
            run([E.slurm_sh, "down", E.hosts_dir])
        subprocess.run([E.hosts_sh, "down", E.hosts_dir])
    log("PASS" if ok else "FAIL")
    return 0 if ok else 1


def summarise(code, work):
    """Writes WORK/summary.txt, the line .ci/run prints: PASS, FAIL or the
    skip with its reason."""
    try:
        with open(os.path.join(work, "summary.txt"), "w") as f:
            f.write({0: "PASS" + E.pass_note,
                     77: E.skip_reason}.get(code, "FAIL") + "\n")
    except OSError:
        pass
    return code


if __name__ == "__main__":
    E.skip_reason = "SKIPPED"
    E.pass_note = ""
    code = main()
    sys.exit(summarise(code, E.work) if hasattr(E, "work") else code)
