#!/usr/bin/python3
"""ONNX's backend node tests through Tessera's importer and CPU runtime.

ONNX ships one-node models (test_<name>/model.onnx) with inputs and expected
outputs (test_data_set_<n>/input_<k>.pb, output_<k>.pb; TensorProto). This
script runs those whose ops the importer accepts through `tessera-eval`
(tools/tessera-eval: import, tsr-lower-to-runtime, tsr-plan-memory, the CPU
runtime; numpy.allclose comparison with rtol = atol = 1e-5) and writes
docs/OpCoverage.md.

    run_node_tests.py run --source debian|pypi --build BUILD
                          [--ops FILE] [--data-root DIR] [--python PY]
                          [--results OUT.json] [-j 2] [--filter REGEX] [-v]
                          [--tool TESSERA_EVAL] [--timeout S]
        Runs one source's tests; exit 1 if any test fails.
          debian  Debian's libonnx-testdata (onnx 1.12), in
                  /usr/share/libonnx-testdata/data/node.
          pypi    the node tests of the `onnx` package the running python
                  imports (PyPI onnx in .venv/test, made by
                  scripts/python-env.sh test); current onnx no longer ships
                  them, so they are generated (onnx.backend.test.case.node)
                  into --data-root, once per onnx version.
        --python PY re-runs this script under PY (the venv for pypi); a
        missing PY is an error, not a skip.
    run_node_tests.py doc --results A.json [B.json ...] (-o FILE | --check FILE)
        Writes docs/OpCoverage.md from results files, or checks that FILE
        equals what they give (exit 1 with the regenerate command if not).
    run_node_tests.py all --build BUILD [-o docs/OpCoverage.md]
        Both sources (pypi under .venv/test/bin/python), then the doc: the
        command in README.md that regenerates docs/OpCoverage.md.

Selection: a test runs when every node's op type is one the importer accepts
(`tessera-import --list-supported-ops`, "<OpType> runtime|constant" per
line, or --ops FILE in the same format).
A single-node test counts for its node's op; a multi-node test (a function
expansion, test_<x>_expanded) for the op of its unexpanded sibling test_<x>.

Modes. Tessera compiles static shapes, so integer inputs that feed shape
operands (Reshape's shape, Slice's starts, ReduceMean-18's axes, Split-18's
split, Pad's pads, Expand's shape, Range's bounds, ...) cannot be runtime
inputs. Every test runs twice:
    int  every integer graph input is bound as a constant before import
         (tessera-eval --bind int); float and bool inputs stay runtime inputs;
    all  every input is bound as a constant (--bind all): this exercises the
         importer's compile-time evaluator (the model usually folds to a
         constant).

Classification, per test and mode (over all its data sets):
    pass  tessera-eval PASS;
    fail  a mismatch (wrong values, shape or type), a crash or timeout, or an
          error whose message does not say the feature is unsupported: a bug;
    skip  a specific reason: a value type Tessera has no type for (STRING,
          complex, 8/4-bit floats, 4-bit ints, UINT64) or one the runtime
          cannot hold (f64, i32, ...), sequence/optional/map values,
          training-mode Dropout, an importer/runtime error saying the
          feature is unsupported (quoted), a data set that contradicts its
          model, or a mismatch on a test whose expected outputs are known to
          be wrong (KNOWN_BAD_DATA, with the evidence).
The tests run in `tessera-eval --batch` processes (one per job thread), so
process start-up is paid once; a crash or a timeout (120 s) fails the job
that caused it and a fresh process takes the next.
"""

import argparse
import concurrent.futures
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEBIAN_ROOT = "/usr/share/libonnx-testdata/data/node"
DOC = "docs/OpCoverage.md"
REGENERATE = ("python3 test/onnx-node/run_node_tests.py all --build build "
              "-o docs/OpCoverage.md")
MODES = ("int", "all")
TIMEOUT_S = 120

# TensorProto data types without a Tessera type. UINT64: the importer would
# read it as a signed i64.
NO_TYPE = {8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 13: "UINT64",
           17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2",
           20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
           24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}

# An ERROR line is a skip when its message says the feature is unsupported.
# "must be a compile-time constant": a shape operand (or an op the importer
# only folds) fed by a runtime input, the static-shape limitation above.
UNSUPPORTED = re.compile(
    r"unsupported|not supported|does not support|only supported on|"
    r"only at compile time|"
    r"cannot hold|runtime can hold|has no Tessera type|"
    r"must be a compile-time constant", re.IGNORECASE)

# The test's own data set contradicts its model (onnx 1.12's
# test_castlike_*BFLOAT16*_expanded give `like` shape [1] for a declared
# [3, 4]): not Tessera's bug.
BAD_DATA = re.compile(r"the data set does not fit the model")

# Tests whose expected outputs are wrong, with the evidence. A mismatch on
# one of these is a skip with this reason; any other result stands.
WINDOW_1_12 = ("broken test data: onnx 1.12's expected window is up to 7.4e-5 "
               "off; onnxruntime 1.23 differs from it as much and agrees "
               "with Tessera within 6e-8")
KNOWN_BAD_DATA = {
    ("debian", "test_blackmanwindow_expanded"): WINDOW_1_12,
    ("debian", "test_blackmanwindow_symmetric_expanded"): WINDOW_1_12,
    ("debian", "test_hammingwindow_expanded"): WINDOW_1_12,
    ("debian", "test_hammingwindow_symmetric_expanded"): WINDOW_1_12,
    ("debian", "test_hannwindow_expanded"): WINDOW_1_12,
    ("debian", "test_hannwindow_symmetric_expanded"): WINDOW_1_12,
}


# --------------------------------------------------------------------------
# Running one source
# --------------------------------------------------------------------------

def parse_ops(text):
    """{op type: 'runtime' | 'constant' | ''} from lines "<OpType> [kind]"."""
    ops = {}
    for line in text.splitlines():
        fields = line.split()
        if fields:
            ops[fields[0]] = fields[1] if len(fields) > 1 else ""
    return ops


def supported_ops(args):
    """The op types the importer converts (tessera-import
    --list-supported-ops: "<OpType> runtime|constant" per line), or those of
    --ops FILE (same format, the kind optional)."""
    if args.ops:
        with open(args.ops) as f:
            return parse_ops(f.read())
    importer = os.path.join(args.build, "tools", "tessera-import",
                            "tessera-import")
    proc = subprocess.run([importer, "--list-supported-ops"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"run_node_tests: {importer} --list-supported-ops failed "
                 f"(exit {proc.returncode}): {proc.stderr.strip()[:300]}; "
                 "pass --ops FILE")
    return parse_ops(proc.stdout)


def generate_pypi_data(root):
    """Writes the installed onnx's node tests into root/node (once per onnx
    version) and returns root/node. onnx.backend.test.cmd_tools generate-data
    writes only the model tests now, so its writer is fed the node cases."""
    import argparse as ap
    import types
    import onnx
    import onnx.backend.test.case.node as node_test
    import onnx.backend.test.cmd_tools as cmd_tools
    stamp = os.path.join(root, "onnx-version")
    node_dir = os.path.join(root, "node")
    if os.path.exists(stamp) and open(stamp).read() == onnx.__version__:
        return node_dir
    print(f"run_node_tests: generating the node tests of onnx "
          f"{onnx.__version__} in {root}", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    cmd_tools.model_test = types.SimpleNamespace(
        collect_testcases=node_test.collect_testcases)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmd_tools.generate_data(ap.Namespace(output=root))
    with open(stamp, "w") as f:
        f.write(onnx.__version__)
    return node_dir


def source_version(source):
    import onnx
    if source == "pypi":
        return f"onnx {onnx.__version__} (PyPI)"
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}",
                           "libonnx-testdata"], capture_output=True, text=True)
    v = proc.stdout.strip() if proc.returncode == 0 else "unknown"
    return f"libonnx-testdata {v} (Debian)"


def default_opset(model):
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 0


def describe(test_dir):
    """op types, opset, value types and data sets of one test."""
    import onnx
    model = onnx.load(os.path.join(test_dir, "model.onnx"),
                      load_external_data=False)
    g = model.graph
    inits = {t.name for t in g.initializer}
    values = [v for v in g.input if v.name not in inits] + list(g.output)
    return {
        "nodes": [(n.domain, n.op_type) for n in g.node],
        "opset": default_opset(model),
        "values": [(v.name, v.type.WhichOneof("value"),
                    v.type.tensor_type.elem_type
                    if v.type.HasField("tensor_type") else 0)
                   for v in values],
        "inputs": [v.name for v in g.input if v.name not in inits],
        "graph": g,
        "data_sets": sorted(d for d in os.listdir(test_dir)
                            if d.startswith("test_data_set_")),
    }


def expanded_parent(name):
    """test_x_expanded[_verN] -> test_x; None for other names."""
    m = re.match(r"(test_.+?)_expanded(_ver\d+)?$", name)
    return m.group(1) if m else None


def prescreen(test_dir, info):
    """A skip reason found without running, or None."""
    for name, kind, dtype in info["values"]:
        if kind != "tensor_type":
            kind = (kind or "unknown").replace("_type", "")
            return f"{kind} value (Tessera has tensors only)"
        if dtype in NO_TYPE:
            return f"{NO_TYPE[dtype]} value (no Tessera type)"
    for node in info["graph"].node:
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            # training_mode: a graph input (bool) or a constant.
            if training_mode_value(test_dir, info, node.input[2]):
                return "training-mode Dropout (random mask)"
    return None


def training_mode_value(test_dir, info, name):
    """Whether a data set sets Dropout's training_mode input; None when it
    is not a graph input (the importer then decides)."""
    import onnx
    from onnx import numpy_helper
    if name in info["inputs"]:
        k = info["inputs"].index(name)
        for ds in info["data_sets"]:
            t = onnx.TensorProto()
            with open(os.path.join(test_dir, ds, f"input_{k}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            if bool(numpy_helper.to_array(t)):
                return True
        return False
    return None


class Evaluator:
    """One `tessera-eval --batch` process (restarted after a crash); each
    job is written to its stdin and answered by one line on its stdout."""

    def __init__(self, tool, timeout=TIMEOUT_S):
        self.tool = tool
        self.timeout = timeout
        self.proc = None
        self.stderr = None

    def start(self):
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [self.tool, "--batch"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))

    def close(self):
        if self.proc:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None

    def run(self, test_dir, data_set, mode):
        """(status, message) of one job."""
        if self.proc is None:
            self.start()
        err_start = os.lseek(self.stderr.fileno(), 0, os.SEEK_END)
        model = os.path.join(test_dir, "model.onnx")
        data = os.path.join(test_dir, data_set)
        try:
            self.proc.stdin.write(f"{model}\t{data}\t{mode}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return "fail", f"timeout after {self.timeout:g} s"
        line = self.proc.stdout.readline()
        if not line:  # the process died on this job
            rc = self.proc.wait()
            self.stderr.seek(err_start)
            err = [e for e in self.stderr.read().splitlines() if e.strip()]
            self.proc = None
            tail = err[0].strip() if err else ""  # the first line of its
            # report (an assertion, LLVM ERROR, ...), not the stack dump
            what = f"signal {-rc}" if rc < 0 else f"exit {rc}"
            return "fail", f"crashed ({what}): {tail}"
        line = line.strip().replace(test_dir + "/", "")
        if line.startswith("PASS"):
            return "pass", line
        if line.startswith("FAIL"):
            return "fail", line
        if line.startswith("ERROR: "):
            msg = line[len("ERROR: "):]
            if UNSUPPORTED.search(msg) or BAD_DATA.search(msg):
                return "skip", msg
        return "fail", line


def skip_reason(msg):
    """A short, test-independent reason for a skip message."""
    m = re.search(r"tensor<[0-9x]*?x?([a-z]+\d+)>", msg)
    if m and re.search(r"cannot hold|runtime can hold|unsupported element "
                       r"type", msg):
        return f"the runtime has no {m.group(1)} (f32/bf16/f16/i64/i1 only)"
    if BAD_DATA.search(msg):
        return ("broken test data: an input's shape differs from the "
                "model's declaration")
    m = re.search(r"\((\w+)\): Tessera evaluates \w+ only at compile time",
                  msg) or re.search(
                      r"\((\w+)\): is only supported on compile-time "
                      r"constants", msg)
    if m:
        return (f"{m.group(1)} on runtime values: no tsr op (the importer "
                "only folds it)")
    m = re.search(r"\((\w+)\): (.*?) \(input '[^']*'\) must be a "
                  r"compile-time constant", msg)
    if m:
        return (f"{m.group(1)}: {m.group(2)} from a runtime input (must be a "
                "compile-time constant)")
    # Drop node and tensor names so that one cause is one reason.
    msg = re.sub(r"^(\w+): ", r"\1: ", msg)
    msg = re.sub(r"'tessera_eval_bound_[^']*': ", "", msg)
    msg = re.sub(r"^(\w+): '[^']*': ", r"\1: ", msg)
    msg = re.sub(r"node '[^']*' \((\w+)\)", r"\1", msg)
    msg = re.sub(r"in node '[^']*'", "", msg)
    msg = re.sub(r"(input|output|initializer|tensor) '[^']*'", r"\1", msg)
    msg = re.sub(r"model\.onnx: ", "", msg)
    msg = re.sub(r"op #\d+ \(kernel (\"\w+\")\) at '[^']*'", r"kernel \1", msg)
    msg = re.sub(r"tensor<[0-9x]+x(\w+)>", r"tensor<...x\1>", msg)
    return msg.strip()


def run_source(args):
    if args.results and os.path.exists(args.results):
        os.remove(args.results)  # never leave a stale result behind
    ops = supported_ops(args)
    if args.source == "debian":
        root = args.data_root or DEBIAN_ROOT
        if not os.path.isdir(root):
            sys.exit(f"run_node_tests: {root} is missing: install Debian's "
                     "libonnx-testdata (scripts/install-deps.sh)")
    else:
        root = generate_pypi_data(args.data_root or os.path.join(
            args.build, "test", "onnx-node", "pypi-data"))
    tool = args.tool or os.path.join(os.path.abspath(args.build), "tools",
                                     "tessera-eval", "tessera-eval")
    if not os.access(tool, os.X_OK):
        sys.exit(f"run_node_tests: {tool} is not built")
    names = sorted(d for d in os.listdir(root)
                   if os.path.isfile(os.path.join(root, d, "model.onnx")))
    if args.filter:
        names = [n for n in names if re.search(args.filter, n)]

    # Describe and select.
    infos = {}
    for name in names:
        infos[name] = describe(os.path.join(root, name))
    tests = []
    for name in names:
        info = infos[name]
        if not info["nodes"] or not all(d in ("", "ai.onnx") and o in ops
                                        for d, o in info["nodes"]):
            continue
        if len(info["nodes"]) == 1:
            op = info["nodes"][0][1]
        else:
            parent = expanded_parent(name)
            pinfo = infos.get(parent) if parent else None
            if pinfo is None and parent:
                path = os.path.join(root, parent)
                pinfo = describe(path) if os.path.isdir(path) else None
            if pinfo and len(pinfo["nodes"]) == 1:
                op = pinfo["nodes"][0][1] + " (expanded)"
            else:
                op = "(multi-node) " + "+".join(
                    sorted({o for _, o in info["nodes"]}))
        tests.append({"name": name, "op": op, "opset": info["opset"]})

    # Run: every worker thread has its own tessera-eval process.
    local = threading.local()
    evaluators = []
    lock = threading.Lock()

    def evaluator():
        if not hasattr(local, "ev"):
            local.ev = Evaluator(tool, args.timeout)
            with lock:
                evaluators.append(local.ev)
        return local.ev

    def run_one(test):
        test_dir = os.path.join(root, test["name"])
        info = infos[test["name"]]
        reason = prescreen(test_dir, info)
        result = {}
        for mode in MODES:
            if reason:
                result[mode] = {"status": "skip", "reason": reason,
                                "detail": reason}
                continue
            if not info["data_sets"]:
                result[mode] = {"status": "fail", "reason": "no data set",
                                "detail": "no test_data_set_* directory"}
                continue
            status, detail = "pass", ""
            for ds in info["data_sets"]:
                status, detail = evaluator().run(test_dir, ds, mode)
                if status != "pass":
                    break
            bad = KNOWN_BAD_DATA.get((args.source, test["name"]))
            if status == "fail" and detail.startswith("FAIL") and bad:
                result[mode] = {"status": "skip", "reason": bad,
                                "detail": f"{bad}: {detail}"}
                continue
            result[mode] = {
                "status": status, "detail": detail,
                "reason": skip_reason(detail) if status == "skip" else
                ("mismatch" if detail.startswith("FAIL") else detail)
                if status == "fail" else ""}
        return result

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for test, result in zip(tests, pool.map(run_one, tests)):
            test["modes"] = result
            if args.verbose or any(r["status"] == "fail"
                                   for r in result.values()):
                for mode in MODES:
                    r = result[mode]
                    print(f"{r['status'].upper():4} {test['name']} "
                          f"[{mode}] {r['detail']}", flush=True)
    for ev in evaluators:
        ev.close()

    counts = {m: {s: sum(t["modes"][m]["status"] == s for t in tests)
                  for s in ("pass", "skip", "fail")} for m in MODES}
    summary = "; ".join(
        f"{m}: {c['pass']} pass, {c['skip']} skip, {c['fail']} fail"
        for m, c in counts.items())
    print(f"run_node_tests: {args.source}: {len(tests)} of {len(names)} "
          f"tests selected; {summary}")
    out = {"source": args.source, "version": source_version(args.source),
           "supported_ops": ops, "total_tests": len(names),
           "tests": tests}
    if args.results:
        os.makedirs(os.path.dirname(os.path.abspath(args.results)),
                    exist_ok=True)
        with open(args.results, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)
    return 1 if any(c["fail"] for c in counts.values()) else 0


# --------------------------------------------------------------------------
# docs/OpCoverage.md
# --------------------------------------------------------------------------

def mode_cell(tests, mode):
    c = {s: sum(t["modes"][mode]["status"] == s for t in tests)
         for s in ("pass", "skip", "fail")}
    cell = f"{c['pass']} / {c['skip']} / {c['fail']}"
    return f"**{cell}**" if c["fail"] else cell


def render(results):
    lines = [
        "# ONNX node-test coverage",
        "",
        "<!-- Generated by test/onnx-node/run_node_tests.py; do not edit. -->",
        "",
        f"Generated by `{REGENERATE}` (README.md, \"Tests\"); "
        "ctest `onnx-node.doc` fails when this file differs from what the "
        "`onnx-node.debian` and `onnx-node.pypi` runs produce.",
        "",
        "ONNX's backend node tests (one-node models with inputs and expected "
        "outputs) whose every node is an op `tessera-import "
        "--list-supported-ops` lists, run by `tessera-eval` "
        "(tools/tessera-eval): import, `tsr-lower-to-runtime`, "
        "`tsr-plan-memory`, the CPU runtime, and a comparison in the sense "
        "of numpy.allclose with rtol = atol = 1e-5 (FLOAT16 outputs 2^-9, "
        "BFLOAT16 2^-6; integers exact).",
        "",
        "Each test runs in two modes. Tessera compiles static shapes, so "
        "integer inputs that feed shape operands (Reshape's shape, Slice's "
        "starts, ReduceMean-18's axes, Split-18's split, Expand's shape, "
        "Range's bounds, ...) cannot be runtime inputs: in mode **int** "
        "every integer graph input is bound as a constant before import "
        "(float and bool inputs stay runtime inputs). In mode **all** every "
        "input is a constant, which exercises the importer's compile-time "
        "evaluator (the model then usually folds to a constant).",
        "",
        "*Converted* is what `tessera-import --list-supported-ops` says of "
        "the op: `runtime` (lowered to tsr ops) or `constant` (evaluated "
        "only when its inputs are compile-time constants). "
        "Cells are passed / skipped / failed node tests. A skip has a "
        "specific reason (below); a failure is a bug (wrong values, a crash, "
        "or an error that does not say the feature is unsupported). "
        "A `(expanded)` row counts the function-expanded tests "
        "(`test_<x>_expanded`) of that op.",
        "",
        "Sources:",
        "",
    ]
    for r in results:
        sel = len(r["tests"])
        lines.append(f"- `{r['source']}`: {r['version']}: {sel} of "
                     f"{r['total_tests']} node tests selected.")
    for r in results:
        lines += ["", f"## {r['source']}: {r['version']}", "",
                  "| op | converted | opsets | tests "
                  "| int: pass / skip / fail | all: pass / skip / fail |",
                  "|---|---|---|---:|---:|---:|"]
        kinds = r["supported_ops"]
        by_op = {}
        for t in r["tests"]:
            by_op.setdefault(t["op"], []).append(t)
        for op in sorted(by_op, key=lambda o: (o.startswith("("), o)):
            tests = by_op[op]
            opsets = ", ".join(str(o) for o in sorted({t["opset"]
                                                       for t in tests}))
            kind = kinds.get(op, "") if isinstance(kinds, dict) else ""
            lines.append(f"| {op} | {kind} | {opsets} | {len(tests)} | "
                         f"{mode_cell(tests, 'int')} | "
                         f"{mode_cell(tests, 'all')} |")
        # Skip reasons.
        skips = {}
        for t in r["tests"]:
            for mode in MODES:
                m = t["modes"][mode]
                if m["status"] == "skip":
                    skips.setdefault((t["op"], m["reason"]), {}).setdefault(
                        mode, []).append(t["name"])
        if skips:
            lines += ["", "### Skipped", "",
                      "| op | reason | int | all |", "|---|---|---:|---:|"]
            for (op, reason) in sorted(skips):
                modes = skips[(op, reason)]
                reason_md = reason.replace("|", "\\|")
                lines.append(f"| {op} | {reason_md} | "
                             f"{len(modes.get('int', []))} | "
                             f"{len(modes.get('all', []))} |")
        fails = [(t["name"], mode, t["op"], t["modes"][mode]["reason"])
                 for t in r["tests"] for mode in MODES
                 if t["modes"][mode]["status"] == "fail"]
        if fails:
            lines += ["", "### Failed", "",
                      "| test | op | mode | result |", "|---|---|---|---|"]
            for name, mode, op, reason in sorted(fails):
                reason_md = reason.replace("|", "\\|")
                lines.append(f"| {name} | {op} | {mode} | {reason_md} |")
    return "\n".join(lines) + "\n"


def doc(args):
    results = []
    for path in args.results:
        if not os.path.exists(path):
            sys.exit(f"run_node_tests: {path} is missing (run the "
                     "onnx-node.debian / onnx-node.pypi tests first)")
        with open(path) as f:
            results.append(json.load(f))
    results.sort(key=lambda r: r["source"])
    text = render(results)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"run_node_tests: wrote {args.output}")
        return 0
    with open(args.check) as f:
        have = f.read()
    if have == text:
        print(f"run_node_tests: {args.check} is up to date")
        return 0
    import difflib
    sys.stdout.writelines(difflib.unified_diff(
        have.splitlines(True), text.splitlines(True), args.check,
        "regenerated"))
    print(f"run_node_tests: {args.check} is out of date; regenerate it with\n"
          f"    {REGENERATE}")
    return 1


def run_all(args):
    build = os.path.abspath(args.build)
    out_dir = os.path.join(build, "test", "onnx-node")
    os.makedirs(out_dir, exist_ok=True)
    venv = args.pypi_python or os.path.join(ROOT, ".venv", "test", "bin",
                                            "python")
    me = os.path.abspath(__file__)
    extra = ["--ops", args.ops] if args.ops else []
    status = 0
    files = []
    for source, py in (("debian", "/usr/bin/python3"), ("pypi", venv)):
        res = os.path.join(out_dir, f"{source}.json")
        files.append(res)
        cmd = [sys.executable, me, "run", "--source", source, "--build",
               build, "--results", res, "-j", str(args.jobs),
               "--python", py] + extra
        status |= subprocess.run(cmd).returncode
    doc_args = argparse.Namespace(results=files, output=args.output,
                                  check=None)
    doc(doc_args)
    return status


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one source's node tests")
    r.add_argument("--source", choices=("debian", "pypi"), required=True)
    r.add_argument("--build", required=True)
    r.add_argument("--ops", help="supported op types, one per line "
                   "(default: tessera-import --list-supported-ops)")
    r.add_argument("--data-root")
    r.add_argument("--python", help="run under this interpreter")
    r.add_argument("--results")
    r.add_argument("-j", "--jobs", type=int, default=2)
    r.add_argument("--filter", help="only tests whose name matches")
    r.add_argument("--tool", help="tessera-eval to run (default: BUILD's)")
    r.add_argument("--timeout", type=float, default=TIMEOUT_S,
                   help="seconds one test may take (default %(default)s)")
    r.add_argument("-v", "--verbose", action="store_true")
    d = sub.add_parser("doc", help="write or check docs/OpCoverage.md")
    d.add_argument("--results", nargs="+", required=True)
    g = d.add_mutually_exclusive_group(required=True)
    g.add_argument("-o", "--output")
    g.add_argument("--check")
    a = sub.add_parser("all", help="both sources, then the doc")
    a.add_argument("--build", required=True)
    a.add_argument("-o", "--output", default=os.path.join(ROOT, DOC))
    a.add_argument("--ops")
    a.add_argument("--pypi-python")
    a.add_argument("-j", "--jobs", type=int, default=2)
    args = p.parse_args()

    if args.cmd == "run":
        if args.python and os.environ.get("TESSERA_NODE_TESTS_PYTHON") != \
                args.python:
            if not os.access(args.python, os.X_OK):
                sys.exit(f"run_node_tests: {args.python} does not exist: "
                         "create the venv with `scripts/python-env.sh test` "
                         "(make test does)")
            os.environ["TESSERA_NODE_TESTS_PYTHON"] = args.python
            argv = [args.python, os.path.abspath(__file__)] + sys.argv[1:]
            os.execv(args.python, argv)
        return run_source(args)
    if args.cmd == "doc":
        return doc(args)
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
