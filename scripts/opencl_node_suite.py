"""The ONNX backend NODE test suite on target ``opencl`` (a CPU OpenCL driver: PoCL or Intel's
runtime): pass rate, kernels vs host fallbacks.

Reuses ``tests/frontend_onnx/node_suite.py`` (case loading, ledger format) and runs each
case through ``nnvm_onnx.backend.Backend`` with ``target="opencl"``, compared by the suite's
own ``assert_similar_outputs``. A case ran as *kernels* when every op of its graph ran as a
generated OpenCL kernel, with *fallback* when at least one op ran as a counted host step
(its NumPy reference kernel; the module's ``stats()["fallback_ops"]``)::

    python scripts/opencl_node_suite.py                 # the whole suite (1,884 cases)
    python scripts/opencl_node_suite.py --subset        # every op type once (179 cases)
    python scripts/opencl_node_suite.py --write-ledger  # rewrite the opencl ledger (full run)
    python scripts/opencl_node_suite.py -k conv -v      # matching cases, with failure reasons
    python scripts/opencl_node_suite.py --fallback-ops  # which ops ran on the host, how often
    python scripts/opencl_node_suite.py --progress run.jsonl      # poll a long run
    python scripts/opencl_node_suite.py --resume run.jsonl        # finish an interrupted one
    python scripts/opencl_node_suite.py --target "opencl -platform=portable"   # on PoCL

The default device is the fastest usable one (``nnvm plugins``); CI runs the suite on every
usable device against the same ledger: 1,828 / 1,884 on both PoCL and Intel's CPU runtime.

CI runs the whole suite (``tests/backends/test_opencl_node_suite.py``): on 2 idle cores with
an empty kernel cache, 284-352 s on PoCL and 45 s on Intel's runtime. A case costs PoCL's cold compile of its one
program (~0.1-0.5 s; a case whose every op is a host step compiles nothing) plus each kernel's
specialisation at its first launch; every module of a worker shares one OpenCL context.
``--subset`` (every ONNX op type once, 179 cases) is a quick local smoke run.

Workers are *spawned* processes (not forked) that receive the loaded cases pickled: forking
a process that already initialised PoCL (its thread pool) can deadlock the child. A worker
that crashes or hangs in native code fails only its own case (see ``_run_pool``).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import re
import signal
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "frontend_onnx"))
import node_suite  # noqa: E402

LEDGER = os.path.join(ROOT, "tests", "backends", "opencl_node_ledger.txt")
#: per case: a cold PoCL build plus the first launch of every kernel, on a loaded CI box
CASE_TIMEOUT_S = 90
#: cases a worker process runs before it is replaced (bounds leaked driver memory)
RECYCLE = 150
#: ops whose tensors are strings whatever the declared types say
STRING_OPS = frozenset({"StringConcat", "StringSplit", "StringNormalizer", "RegexFullMatch"})
#: the Done-when bar of the opencl target (passed / every node case)
MIN_PASS_RATE = 0.95


def _alarm(signum, frame):
    raise TimeoutError(f"timed out after {CASE_TIMEOUT_S}s")


def case_ops(case) -> set[str]:
    """The op types a case's model runs at top level, as ``domain::OpType``."""
    return {f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in case.model.graph.node}


def subset_names(cases) -> list[str]:
    """A deterministic subset covering every ONNX op type of the suite at least once.

    Op types are visited in sorted order; an op type no chosen case runs yet adds the first
    case running it, non-``_expanded`` cases first (the op itself, not its function body),
    then by name. Depends on the cases only, never on results, so the ledger cannot steer it.
    """
    by_op = collections.defaultdict(list)
    for c in cases:
        for op in case_ops(c):
            by_op[op].append(c)
    chosen: dict[str, set[str]] = {}
    for op in sorted(by_op):
        if any(op in ops for ops in chosen.values()):
            continue
        first = min(by_op[op], key=lambda c: (c.name.endswith("_expanded"), c.name))
        chosen[first.name] = case_ops(first)
    return sorted(chosen)


def touches_strings(case) -> bool:
    """Whether a case's graph feeds, returns, holds or computes string tensors."""
    from onnx import TensorProto

    g = case.model.graph
    typed = list(g.input) + list(g.output) + list(g.value_info)
    return (any(v.type.tensor_type.elem_type == TensorProto.STRING for v in typed)
            or any(t.data_type == TensorProto.STRING for t in g.initializer)
            or any(n.op_type in STRING_OPS for n in g.node))


def run_case(case, target: str = "opencl") -> tuple[str, str | None, str, list[str], float]:
    """One case -> (name, None | failure reason, mode, fallback op types, seconds).

    ``mode`` is ``kernels`` (every op ran as a generated kernel), ``fallback`` (some op ran
    as a host step) or ``none`` (failed before a module was built).
    """
    import numpy as np
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from nnvm_onnx.backend import Backend

    t0 = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    rep = None
    reason = None
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rep = Backend.prepare(case.model, "CPU", target=target)
            for inputs, outputs in case.data_sets:
                got = rep.run([_normalize_tensor(i) for i in inputs])
                Runner.assert_similar_outputs([_normalize_tensor(o) for o in outputs],
                                              list(got), rtol=case.rtol, atol=case.atol)
    except BaseException as exc:  # noqa: BLE001 - every failure is a result here
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        reason = re.sub(r"\s+", " ", text)[:300]
    finally:
        signal.alarm(0)
    # the adapter caches one module per input signature (_cache: key -> (module, ...))
    modules = [entry[0] for entry in getattr(rep, "_cache", {}).values()]
    fallbacks: set[str] = set()
    for m in modules:
        for desc in m.stats().get("fallback_ops", {}).values():
            fallbacks.add(str(desc).split(":", 1)[0])
    mode = "none" if not modules else ("fallback" if fallbacks else "kernels")
    return case.name, reason, mode, sorted(fallbacks), time.perf_counter() - t0


def _serve(conn) -> None:
    """Worker process: run the jobs the parent sends until it sends None."""
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(run_case(*job))


def _died(case, proc, seconds: float, killed: bool) -> tuple:
    if killed:
        why = f"TimeoutError: killed after {seconds:.0f}s (stuck outside Python)"
    else:
        code = proc.exitcode
        sig = f" ({signal.Signals(-code).name})" if code is not None and code < 0 else ""
        why = (f"WorkerCrash: the process running this case died with exit code {code}{sig} "
               "instead of raising an error")
    return case.name, why, "none", [], seconds


def _run_pool(jobs: list, workers: int):
    """Yield ``run_case`` rows for ``jobs`` from ``workers`` spawned processes, one pipe each.

    Why not ``multiprocessing.Pool``: a worker that crashes (a segfault in a native library)
    or hangs inside C code loses its task and the pool waits forever. Here the parent knows
    which case each worker runs, records a crash or a hard timeout as that case's failure,
    and starts a replacement worker. Workers are recycled every ``RECYCLE`` cases (each case
    leaves an OpenCL context and a compiled program behind until collected).
    """
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    pending = list(range(len(jobs)))[::-1]
    busy: dict = {}  # conn -> [process, job index, start time, cases served]

    def start():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child,), daemon=True)
        proc.start()
        child.close()
        return parent, proc

    def feed(conn, proc, served: int) -> None:
        if pending and served < RECYCLE:
            i = pending.pop()
            conn.send(jobs[i])
            busy[conn] = [proc, i, time.monotonic(), served + 1]
            return
        try:
            conn.send(None)
        except OSError:
            pass
        proc.join(5)
        if proc.is_alive():
            proc.kill()
        conn.close()
        if pending:
            feed(*start(), 0)

    for _ in range(min(workers, len(jobs))):
        feed(*start(), 0)
    while busy:
        ready = set(wait(list(busy) + [b[0].sentinel for b in busy.values()], timeout=5))
        for conn in list(busy):
            proc, i, t0, served = busy[conn]
            row = None
            if conn in ready or proc.sentinel in ready:
                try:
                    row = conn.recv() if conn.poll() else None
                except (EOFError, OSError):
                    row = None
            if row is not None:
                del busy[conn]
                yield row
                # string tensors can corrupt a worker's memory (see KNOWN_CAUSES): retire it
                # so the damage cannot crash a later, unrelated case
                feed(conn, proc, RECYCLE if touches_strings(jobs[i][0]) else served)
                continue
            hung = time.monotonic() - t0 > CASE_TIMEOUT_S + 60
            if proc.is_alive() and not hung:
                continue
            if hung:
                proc.kill()
            proc.join()
            del busy[conn]
            conn.close()
            yield _died(jobs[i][0], proc, time.monotonic() - t0, hung)
            if pending:
                feed(*start(), 0)


def run_all(pattern: str | None = None, subset: bool = False, workers: int = 2,
            target: str = "opencl", progress: str | None = None,
            cases: list | None = None) -> dict[str, tuple]:
    """{name: (reason, mode, fallback op types, seconds)} for every (matching) case.

    ``progress``: a JSON-lines file each result is appended to as it arrives (a long run can
    be polled, and resumed with ``--resume`` after an interruption).
    """
    if cases is None:
        cases = node_suite.load_cases(pattern)
    if subset:
        keep = set(subset_names(cases))
        cases = [c for c in cases if c.name in keep]
    jobs = [(c, target) for c in cases]
    out = open(progress, "a", encoding="utf-8") if progress else None
    results: dict[str, tuple] = {}
    try:
        for name, reason, mode, fallbacks, secs in _run_pool(jobs, max(1, workers)):
            results[name] = (reason, mode, fallbacks, secs)
            if out:
                out.write(json.dumps([name, reason, mode, fallbacks, round(secs, 2)]) + "\n")
                out.flush()
    finally:
        if out:
            out.close()
    return results


def summary(results: dict[str, tuple]) -> dict[str, int]:
    passed = [v for v in results.values() if v[0] is None]
    return {"total": len(results), "passed": len(passed),
            "passed_kernels": sum(1 for v in passed if v[1] == "kernels"),
            "passed_fallback": sum(1 for v in passed if v[1] == "fallback")}


def describe(s: dict[str, int]) -> str:
    return (f"{s['passed']}/{s['total']} passed ({100.0 * s['passed'] / max(s['total'], 1):.1f}"
            f"%): {s['passed_kernels']} with every op as a generated kernel, "
            f"{s['passed_fallback']} with host fallback steps")


#: diagnosed opencl-only failures (name regex -> cause), written into the ledger's reasons
KNOWN_CAUSES = (
    (r"^test_cast(like)?_FLOAT_to_FLOAT8", "the saturating Cast clips on the device with OpenCL "
     "min/max, which drop NaN (ONNX keeps it); the float8 cast itself runs on the host"),
    (r"^test_maxpool_2d_uint8$", "codegen: max-pool's -inf start value has no uint8 literal"),
    (r"^test_pow_types_int", "codegen: integer Pow renders pow() on integers, which OpenCL C "
     "lacks (build error)"),
    (r"^test_string_concat", "string (object) tensors are copied through the device arena: "
     "wrong values, or a segfault of the process"),
)


def ledger_reason(name: str, reason: str, reference: dict[str, str]) -> str:
    """The ledger's reason for a failure: where it comes from, then the (trimmed) error."""
    error = re.sub(r"(/[\w.+-]+)+/", "", reason)[:240]
    if name in reference:
        return f"also fails on target 'reference': {error}"
    for rx, cause in KNOWN_CAUSES:
        if re.search(rx, name):
            return f"opencl: {cause}: {error}"
    return f"opencl only: {error}"


def read_ledger(path: str = LEDGER) -> dict[str, str]:
    return node_suite.read_ledger(path)


def write_ledger(results: dict[str, tuple], path: str = LEDGER) -> None:
    reference = node_suite.read_ledger()
    failed = sorted((n, ledger_reason(n, v[0], reference)) for n, v in results.items()
                    if v[0] is not None)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# Expected failures of the ONNX node test suite (onnx 1.23.2) on target "
                 "'opencl' (every usable CPU driver:\n# PoCL, Intel's CPU runtime). One line each: test name, then the reason. A listed "
                 "test that passes, or an\n# unlisted one that fails, fails tests/backends/"
                 "test_opencl_node_suite.py; regenerate with\n"
                 "#   python scripts/opencl_node_suite.py --write-ledger\n"
                 f"# Result when written (full suite): {describe(summary(results))}.\n")
        for name, reason in failed:
            fh.write(f"{name} # {reason}\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-k", dest="pattern", default=None, help="regex on test names")
    p.add_argument("--subset", action="store_true", help="every op type once (a quick smoke run)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--target", default="opencl")
    p.add_argument("--write-ledger", action="store_true")
    p.add_argument("--fallback-ops", action="store_true",
                   help="count passing cases per op type that ran as a host step")
    p.add_argument("--progress", default=None, help="append each result (JSON line) here")
    p.add_argument("--json", default=None, help="also write {name: [reason, mode, ops, s]}")
    p.add_argument("--resume", default=None,
                   help="a --progress file of an interrupted run: skip the cases it has")
    p.add_argument("-v", action="store_true", help="print every failure")
    args = p.parse_args(argv)
    t0 = time.time()
    cases = node_suite.load_cases(args.pattern)
    if args.subset:
        keep = set(subset_names(cases))
        cases = [c for c in cases if c.name in keep]
    done: dict[str, tuple] = {}
    if args.resume and os.path.exists(args.resume):
        with open(args.resume, encoding="utf-8") as fh:
            for line in fh:
                name, *rest = json.loads(line)
                done[name] = tuple(rest)
        cases = [c for c in cases if c.name not in done]
    results = dict(done)
    results.update(run_all(args.pattern, False, args.workers, args.target,
                           args.progress or args.resume, cases=cases))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=0, sort_keys=True)
    if args.v or args.pattern:
        for n, v in sorted(results.items()):
            if v[0] is not None:
                print(f"{n}: {v[0]}")
    if args.fallback_ops:
        count = collections.Counter(op for v in results.values() if v[0] is None
                                    for op in v[2])
        for op, c in count.most_common():
            print(f"  host step {op}: {c} passing case(s)")
    print(f"{describe(summary(results))}, in {time.time() - t0:.0f}s")
    if args.write_ledger:
        if args.pattern or args.subset:
            print("refusing to write the ledger from a subset", file=sys.stderr)
            return 2
        write_ledger(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
