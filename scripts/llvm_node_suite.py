"""The ONNX backend NODE test suite on target ``llvm``: pass rate, compiled vs fallback.

Reuses ``tests/frontend_onnx/node_suite.py`` (case loading, ledger format) and runs each
case through ``nnvm_onnx.backend.Backend`` with ``target="llvm"``. A passing case is
*compiled* when every op of its graph ran as TVM-generated code, *fallback* when at least
one op ran its NumPy reference kernel inside the llvm executor (``stats()``'s
``fallback_ops``)::

    python scripts/llvm_node_suite.py                  # the whole suite (~1,900 cases)
    python scripts/llvm_node_suite.py --subset         # the CI subset (stratified by op)
    python scripts/llvm_node_suite.py --write-ledger   # rewrite tests/backends/llvm_node_ledger.txt
    python scripts/llvm_node_suite.py -k conv -v       # a subset, with failure reasons
    python scripts/llvm_node_suite.py --fallback-ops   # which ops fall back, how often

``tests/backends/test_llvm_node_suite.py`` runs the subset in CI (the full suite compiles
~1,500 small models through TVM; see ``SUBSET_EVERY``).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import os
import re
import signal
import sys
import time
import warnings
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "frontend_onnx"))
import node_suite  # noqa: E402

LEDGER = os.path.join(ROOT, "tests", "backends", "llvm_node_ledger.txt")
#: generous: the first case of a worker imports TVM and may compile threadpool.c
CASE_TIMEOUT_S = 60
#: the CI subset keeps the first case of every op family plus one in SUBSET_EVERY of the rest
SUBSET_EVERY = 4


def _alarm(signum, frame):
    raise TimeoutError(f"timed out after {CASE_TIMEOUT_S}s")


def _family(name: str) -> str:
    """The op family of a case name: ``test_conv_with_strides_padding`` -> ``conv``."""
    stem = name[len("test_"):] if name.startswith("test_") else name
    return re.split(r"_", stem.replace("_expanded", ""), maxsplit=1)[0]


def subset_names(names) -> set[str]:
    """A deterministic, stratified subset: per family (first word of the case name) the
    alphabetically first case, plus every case whose crc32 falls in 1/SUBSET_EVERY."""
    by_family = collections.defaultdict(list)
    for n in sorted(names):
        by_family[_family(n)].append(n)
    keep = set()
    for members in by_family.values():
        keep.add(members[0])
        keep.update(n for n in members if zlib.crc32(n.encode()) % SUBSET_EVERY == 0)
    return keep


def run_case(index: int, target: str = "llvm") -> tuple[str, str | None, str, list[str]]:
    """One case -> (name, None | failure reason, mode, fallback op names).

    ``mode`` is ``compiled`` (every op ran generated code), ``fallback`` (some op ran its
    reference kernel) or ``none`` (failed before a module was built).
    """
    import numpy as np
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from nnvm_onnx.backend import Backend

    case = node_suite._CASES[index]
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
    modules = [entry[0] for entry in getattr(rep, "_cache", {}).values()]
    fallbacks: set[str] = set()
    for m in modules:
        fallbacks.update(m.stats().get("fallback_ops", ()))
    mode = "none" if not modules else ("fallback" if fallbacks else "compiled")
    return case.name, reason, mode, sorted(fallbacks)


def run_all(pattern: str | None = None, subset: bool = False, workers: int = 2,
            target: str = "llvm") -> dict[str, tuple]:
    """{name: (reason, mode, fallback ops)} for every (matching) case; ``workers``
    processes forked after the cases are loaded (loading them takes ~20 s)."""
    cases = node_suite.load_cases(pattern)
    if subset:
        keep = subset_names(c.name for c in cases)
        cases = [c for c in cases if c.name in keep]
    node_suite._CASES = cases
    results: dict[str, tuple] = {}
    jobs = [(i, target) for i in range(len(cases))]
    if workers <= 1 or len(cases) < 8:
        rows = [run_case(*j) for j in jobs]
    else:
        with mp.get_context("fork").Pool(workers, maxtasksperchild=400) as pool:
            rows = pool.starmap(run_case, jobs, chunksize=4)
    for name, reason, mode, fallbacks in rows:
        results[name] = (reason, mode, fallbacks)
    return results


def summary(results: dict[str, tuple]) -> dict[str, int]:
    passed = [v for v in results.values() if v[0] is None]
    return {"total": len(results), "passed": len(passed),
            "passed_compiled": sum(1 for v in passed if v[1] == "compiled"),
            "passed_fallback": sum(1 for v in passed if v[1] == "fallback")}


def read_ledger(path: str = LEDGER) -> dict[str, str]:
    return node_suite.read_ledger(path)


def write_ledger(results: dict[str, tuple], path: str = LEDGER) -> None:
    s = summary(results)
    failed = sorted((n, v[0]) for n, v in results.items() if v[0] is not None)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# Expected failures of the ONNX node test suite (onnx 1.23.2) on target "
                 "'llvm'.\n# One line each: test name, then the reason. A listed test that "
                 "passes, or an\n# unlisted one that fails, fails tests/backends/"
                 "test_llvm_node_suite.py; regenerate with\n"
                 "#   python scripts/llvm_node_suite.py --write-ledger\n"
                 f"# Result when written: {s['passed']}/{s['total']} passed "
                 f"({100.0 * s['passed'] / max(s['total'], 1):.1f}%): "
                 f"{s['passed_compiled']} fully compiled, {s['passed_fallback']} with "
                 "reference fallbacks.\n")
        for name, reason in failed:
            fh.write(f"{name} # {reason}\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-k", dest="pattern", default=None, help="regex on test names")
    p.add_argument("--subset", action="store_true", help="the stratified CI subset")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--write-ledger", action="store_true")
    p.add_argument("--fallback-ops", action="store_true",
                   help="count passing cases per op that fell back to its reference kernel")
    p.add_argument("--json", default=None, help="also write {name: [reason, mode, ops]} here")
    p.add_argument("-v", action="store_true", help="print every failure")
    args = p.parse_args(argv)
    t0 = time.time()
    results = run_all(args.pattern, args.subset, args.workers)
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=0, sort_keys=True)
    if args.v or args.pattern:
        for n, v in sorted(results.items()):
            if v[0] is not None:
                print(f"{n}: {v[0]}")
    if args.fallback_ops:
        count = collections.Counter(op for v in results.values() for op in v[2])
        for op, c in count.most_common():
            print(f"  fallback {op}: {c}")
    s = summary(results)
    print(f"{s['passed']}/{s['total']} passed ({100.0 * s['passed'] / max(s['total'], 1):.1f}%)"
          f": {s['passed_compiled']} fully compiled, {s['passed_fallback']} with reference "
          f"fallbacks, in {time.time() - t0:.0f}s")
    if args.write_ledger:
        if args.pattern or args.subset:
            print("refusing to write the ledger from a subset", file=sys.stderr)
            return 2
        write_ledger(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
