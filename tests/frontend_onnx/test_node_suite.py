"""The ONNX backend NODE test suite (onnx.backend.test, 1,884 cases in onnx 1.23.2) on NNVM.

Every case runs through ``nnvm_onnx.backend.Backend`` on the reference target and is
compared by the suite's own ``assert_similar_outputs``. ``node_ledger.txt`` lists the
expected failures with reasons; it only shrinks: a new failure fails this test, and so does
a listed case that now passes (remove it from the ledger, or regenerate it with
``python tests/frontend_onnx/node_suite.py --write-ledger``). The pass rate counts every
case in the denominator.
"""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("onnx")
sys.path.insert(0, os.path.dirname(__file__))
import node_suite  # noqa: E402

#: Floor for the pass rate (passed / all node cases); raise it as the ledger shrinks.
MIN_PASS_RATE = 0.974


@pytest.fixture(scope="module")
def results():
    return node_suite.run_all(workers=max(2, min(os.cpu_count() or 2, 4)))


def test_node_suite_matches_ledger(results):
    ledger = node_suite.read_ledger()
    failed = {n: r for n, r in results.items() if r is not None}
    new = {n: r for n, r in failed.items() if n not in ledger}
    fixed = sorted(n for n in ledger if n in results and results[n] is None)
    stale = sorted(n for n in ledger if n not in results)
    msg = []
    if new:
        msg.append("new failures (fix them, or add to node_ledger.txt with a reason):\n" +
                   "\n".join(f"  {n}: {r}" for n, r in sorted(new.items())[:30]))
    if fixed:
        msg.append("ledger entries that now pass (remove them from node_ledger.txt):\n  " +
                   "\n  ".join(fixed[:50]))
    if stale:
        msg.append("ledger entries naming no test:\n  " + "\n  ".join(stale[:20]))
    assert not msg, "\n".join(msg)


def test_node_suite_pass_rate(results):
    total = len(results)
    passed = sum(1 for r in results.values() if r is None)
    assert total >= 1884, f"expected the whole node suite; got {total} cases"
    assert passed / total >= MIN_PASS_RATE, f"{passed}/{total} = {passed / total:.1%}"


def test_ledger_entries_have_reasons():
    for name, reason in node_suite.read_ledger().items():
        assert name.startswith("test_") and reason, name
