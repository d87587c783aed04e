"""Run the ONNX backend NODE test suite (onnx.backend.test) against NNVM, in parallel.

Used by ``test_node_suite.py`` and as a script::

    python tests/frontend_onnx/node_suite.py                 # print the pass rate
    python tests/frontend_onnx/node_suite.py --write-ledger  # rewrite the ledger
    python tests/frontend_onnx/node_suite.py -k conv         # a subset, with failure reasons

Each case is the onnx wheel's in-memory node test (model + data sets), prepared with
``nnvm_onnx.backend.Backend`` on the target and compared with the suite's own
``assert_similar_outputs`` (its rtol/atol). Every case counts in the denominator.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import signal
import sys
import time
import warnings

LEDGER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_ledger.txt")
CASE_TIMEOUT_S = 20
_CASES: list = []


def load_cases(pattern: str | None = None) -> list:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"timed out after {CASE_TIMEOUT_S}s")


def run_case(index: int, target: str = "reference") -> tuple[str, str | None]:
    """Run one case; returns (name, None) on success or (name, one-line failure reason)."""
    import numpy as np
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from nnvm_onnx.backend import Backend

    case = _CASES[index]
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            rep = Backend.prepare(case.model, "CPU", target=target)
            for inputs, outputs in case.data_sets:
                got = rep.run([_normalize_tensor(i) for i in inputs])
                Runner.assert_similar_outputs([_normalize_tensor(o) for o in outputs], list(got),
                                              rtol=case.rtol, atol=case.atol)
        return case.name, None
    except BaseException as exc:  # noqa: BLE001 - every failure is a result here
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
        return case.name, re.sub(r"\s+", " ", text)[:300]
    finally:
        signal.alarm(0)


def run_all(pattern: str | None = None, target: str = "reference", workers: int | None = None
            ) -> dict[str, str | None]:
    """Run every (matching) node case; returns {name: None | reason}."""
    global _CASES
    _CASES = load_cases(pattern)
    workers = workers or min(os.cpu_count() or 1, 4)
    results: dict[str, str | None] = {}
    if workers <= 1 or len(_CASES) < 8:
        for i in range(len(_CASES)):
            name, reason = run_case(i, target)
            results[name] = reason
        return results
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, maxtasksperchild=200) as pool:
        for name, reason in pool.starmap(run_case, [(i, target) for i in range(len(_CASES))],
                                         chunksize=8):
            results[name] = reason
    return results


def read_ledger(path: str = LEDGER) -> dict[str, str]:
    """{test name: reason} of expected failures."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            out[name] = reason.strip().lstrip("#").strip()
    return out


def write_ledger(results: dict[str, str | None], path: str = LEDGER) -> None:
    failed = sorted((n, r) for n, r in results.items() if r is not None)
    total = len(results)
    passed = total - len(failed)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# Expected failures of the ONNX node test suite (onnx 1.23.2) on target "
                 "'reference'.\n# One line each: test name, then the reason. The ledger only "
                 "shrinks: a listed test\n# that passes fails test_node_suite.py; regenerate "
                 "with\n#   python tests/frontend_onnx/node_suite.py --write-ledger\n"
                 f"# Result when written: {passed}/{total} passed "
                 f"({100.0 * passed / max(total, 1):.1f}%).\n")
        for name, reason in failed:
            fh.write(f"{name} # {reason}\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-k", dest="pattern", default=None, help="regex on test names")
    p.add_argument("--target", default="reference")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--write-ledger", action="store_true")
    p.add_argument("-v", action="store_true", help="print every failure")
    args = p.parse_args(argv)
    t0 = time.time()
    results = run_all(args.pattern, args.target, args.workers)
    failed = {n: r for n, r in results.items() if r is not None}
    if args.v or args.pattern:
        for n, r in sorted(failed.items()):
            print(f"{n}: {r}")
    total = len(results)
    passed = total - len(failed)
    print(f"{passed}/{total} passed ({100.0 * passed / max(total, 1):.1f}%) "
          f"in {time.time() - t0:.0f}s")
    if args.write_ledger:
        if args.pattern:
            print("refusing to write the ledger from a subset", file=sys.stderr)
            return 2
        write_ledger(results)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
