"""The ONNX backend NODE test suite on target ``llvm`` (a stratified subset in CI).

Every case is imported by ``nnvm_onnx.backend.Backend`` with ``target="llvm"``, compiled
through TVM (ops without a lowering rule run their reference kernel inside the llvm
executor and are counted) and compared by the suite's own ``assert_similar_outputs``.
Compiling ~1,900 small models does not fit CI on 2 cores, so this test runs the
deterministic subset of ``scripts/llvm_node_suite.py --subset`` (every op family's first
case plus one case in ``SUBSET_EVERY`` by crc32) in a pool of 2 processes; the whole suite
is ``python scripts/llvm_node_suite.py`` and its result is the ledger's header line.

``llvm_node_ledger.txt`` lists the expected failures of the whole suite; within the subset
a new failure fails this test and so does a listed case that now passes.
"""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("onnx")
from nnvm.backend import get_backend  # noqa: E402

REASON = get_backend("llvm", require_available=False).compiler_available()
if REASON is not None:
    pytest.skip(REASON, allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import llvm_node_suite  # noqa: E402

#: Floors for the subset: pass rate, and the share of passing cases that ran fully compiled.
MIN_PASS_RATE = 0.84
MIN_COMPILED_SHARE = 0.75


@pytest.fixture(scope="module")
def results():
    return llvm_node_suite.run_all(subset=True, workers=2)


def test_subset_is_stratified_and_deterministic():
    names = [c.name for c in llvm_node_suite.node_suite.load_cases("^test_(relu|conv|gather)")]
    a, b = llvm_node_suite.subset_names(names), llvm_node_suite.subset_names(reversed(names))
    assert a == b and 0 < len(a) < len(names)
    assert {llvm_node_suite._family(n) for n in a} == {llvm_node_suite._family(n)
                                                        for n in names}


def test_llvm_node_suite_matches_ledger(results):
    ledger = llvm_node_suite.read_ledger()
    failed = {n: v[0] for n, v in results.items() if v[0] is not None}
    new = {n: r for n, r in failed.items() if n not in ledger}
    fixed = sorted(n for n in ledger if n in results and results[n][0] is None)
    msg = []
    if new:
        msg.append("new failures on llvm (fix them, or add to llvm_node_ledger.txt):\n" +
                   "\n".join(f"  {n}: {r}" for n, r in sorted(new.items())[:30]))
    if fixed:
        msg.append("llvm_node_ledger.txt entries that now pass (remove them):\n  " +
                   "\n  ".join(fixed[:50]))
    assert not msg, "\n".join(msg)


def test_llvm_node_suite_pass_rate_and_compiled_share(results):
    s = llvm_node_suite.summary(results)
    assert s["total"] >= 300, f"the subset shrank to {s['total']} cases"
    assert s["passed"] / s["total"] >= MIN_PASS_RATE, s
    assert s["passed_compiled"] / max(s["passed"], 1) >= MIN_COMPILED_SHARE, s


def test_ledger_entries_have_reasons():
    ledger = llvm_node_suite.read_ledger()
    assert ledger, "llvm_node_ledger.txt is missing or empty"
    for name, reason in ledger.items():
        assert name.startswith("test_") and reason, name
