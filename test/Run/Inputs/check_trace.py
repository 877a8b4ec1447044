#!/usr/bin/python3
"""check_trace.py TRACE.json STEP: checks a tessera-run --trace file (Chrome
trace JSON) and prints, per process (world rank), its name and the names of
its "X" events of step STEP in start order, e.g.
  pid 0 'rank 0 (dp=0 tp=0 pp=0)' tid 0: F0.0 F0.1 B0.0 B0.1 apply step
Events must be complete ("ph" "X") with non-negative numeric "ts"/"dur" in
microseconds, a known "cat", args {chunk, micro_batch, recv_wait_us, stage,
step} with stage == tid and 0 <= recv_wait_us <= dur, and nest inside their step's "step" event. Exits 1 otherwise."""
import json
import sys

trace = json.load(open(sys.argv[1]))
step = int(sys.argv[2])
assert trace["displayTimeUnit"] == "ms", trace.get("displayTimeUnit")
names, events = {}, {}
for e in trace["traceEvents"]:
    if e["ph"] == "M":
        if e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
        continue
    assert e["ph"] == "X", e
    assert e["cat"] in ("forward", "backward", "apply", "step"), e
    assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
    assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
    a = e["args"]
    assert sorted(a) == ["chunk", "micro_batch", "recv_wait_us", "stage", "step"], e
    assert 0 <= a["recv_wait_us"] <= e["dur"] + 1e-3, e
    assert a["stage"] == e["tid"], e
    if a["step"] == step:
        events.setdefault((e["pid"], e["tid"]), []).append(e)
for (pid, tid), evs in sorted(events.items()):
    outer = [e for e in evs if e["cat"] == "step"]
    assert len(outer) == 1, evs
    s = outer[0]
    for e in evs:
        assert s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3, (e, s)
    evs.sort(key=lambda e: (e["ts"], e["cat"] == "step"))
    order = [e["name"] for e in evs if e["cat"] != "step"] + ["step"]
    print(f"pid {pid} '{names[pid]}' tid {tid}: {' '.join(order)}")
