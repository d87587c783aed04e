"""One op conformance suite: every case of conformance_cases.CASES on every usable target,
compared with the reference interpreter.

Cases are built into a few graphs per target (each case a disjoint subgraph with its own
inputs, ``CHUNK`` cases a graph) compiled at opt_level 0 (no fusion, no constant folding:
every op meets its own kernel), so each target compiles a handful of programs, not one per
case. Each case is then its own test, ``<target>-<op>-<case id>``. Ops a backend runs on the
host instead of a kernel are counted, and must stay within the checked-in ledger
``host_fallback_<backend>.txt``, which may only shrink. Ops with a reference kernel but no
case must be listed in ``uncased_ops.txt`` (also only shrinking: empty now) or in
``CANNOT_CASE``.
Cases a target is known to fail (``conformance_cases.GAPS``) run alone, as xfails with the
reason, so a failing build takes no other case down and a fix is noticed.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import nnvm
from nnvm.ir import Graph, Node, NodeEntry, make_node
from nnvm.op import get_op, list_op_names

from conformance_cases import ALL_CASES, CASES, GAPS
from conformance_targets import GPU_TEMPLATE_OPS, backend_of, targets

HERE = pathlib.Path(__file__).resolve().parent
#: cases per graph: keeps one llvm compile well under a minute on 2 cores
CHUNK = 64
#: (rtol, atol) per output dtype; integer and bool outputs must match exactly
TOLERANCE = {"float16": (1e-2, 1e-3), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}
#: ops with a reference kernel that a fixed-input case cannot check, with why
CANNOT_CASE = {
    "tf_random_normal": "draws random numbers (TinyFlow): no two runs agree, so there is "
                        "nothing to compare; its shape/dtype rules are tested in tests/examples",
}

#: ops that test modules register for themselves (present only when such a module ran
#: first, as pytest-randomly's order can have it): never cased, never stale
TEST_ONLY_OPS = {"_test_inplace_cast"}  # tests/passes/test_plan_memory.py's in-place cast

TARGETS = targets()


def _key(case):
    return f"{case.op}-{case.id}"


def _gap(target_id, case):
    """Why ``target_id`` is known to fail ``case``, or None."""
    return GAPS.get(_key(case), {}).get(backend_of(target_id))


def _cases_for(target_id):
    """The cases built into ``target_id``'s chunked graphs (its known gaps run alone)."""
    cases = [c for c in CASES if _gap(target_id, c) is None]
    if target_id == "opencl_portable_kernels":
        return [c for c in cases if c.op in GPU_TEMPLATE_OPS]
    return cases


def _dtype_name(array):
    """NNVM's name of an input's dtype: NumPy object arrays of ``str`` are ``string``."""
    return "string" if array.dtype == object else array.dtype.name


def _case_graph(i, case):
    op = get_op(case.op)
    attrs = dict(case.attrs)
    if op.is_variadic and "num_args" not in attrs:
        attrs["num_args"] = len(case.arrays)
    parsed = op.parse_attrs(attrs, f"conformance case {case.op}-{case.id}")
    inputs = op.input_names(parsed) if not op.is_variadic else \
        [f"arg{j}" for j in range(len(case.arrays))]
    names = [f"c{i}_{n}" for n in inputs]
    node = make_node(op.name, [NodeEntry(Node(None, n), 0, 0) for n in names], parsed,
                     f"c{i}_{op.name}")
    outs = [NodeEntry(node, k, 0) for k in range(op.num_visible_outputs(parsed))]
    arrays = dict(zip(names, case.arrays))
    params = {names[j] for j in case.params}
    return outs, arrays, params


class Suite:
    """One graph of ``cases``: its reference outputs, and per target the outputs and stats."""

    def __init__(self, cases):
        heads, self.feed, self.param_names, self.spans = [], {}, set(), []
        for i, case in enumerate(cases):
            outs, arrays, params = _case_graph(i, case)
            self.spans.append((len(heads), len(outs)))
            heads += outs
            self.feed.update(arrays)
            self.param_names |= params
        self.graph = Graph(heads)
        used = set(self.graph.index.input_names)
        self.feed = {k: v for k, v in self.feed.items() if k in used}
        self.ref = self.run("reference")[0]

    def run(self, target):
        params = {k: v for k, v in self.feed.items() if k in self.param_names}
        lib = nnvm.compiler.build(self.graph, target=target, opt_level=0, params=params,
                                  shape={k: v.shape for k, v in self.feed.items()},
                                  dtype={k: _dtype_name(v) for k, v in self.feed.items()})
        return lib.run(**{k: self.feed[k] for k in lib.input_names}), lib.stats()


_SUITES: dict = {}
_RESULTS: dict = {}


def _chunk_result(target_id, target, chunk):
    """``(suite, outputs, stats)`` of one chunk on one target, built once per session; a
    build error is kept and raised by every case of the chunk."""
    key = (target_id, chunk)
    if key not in _RESULTS:
        cases = _cases_for(target_id)[chunk * CHUNK:(chunk + 1) * CHUNK]
        try:
            skey = tuple(map(_key, cases))
            if skey not in _SUITES:
                _SUITES[skey] = Suite(cases)
            suite = _SUITES[skey]
            _RESULTS[key] = (suite, *suite.run(target))
        except Exception as exc:  # noqa: BLE001 - re-raised by each case test
            _RESULTS[key] = exc
    if isinstance(_RESULTS[key], Exception):
        raise _RESULTS[key]
    return _RESULTS[key]


def _params():
    """``(target id, target, index in its chunked cases or None for a known gap, case)``."""
    out = []
    for tid, target, reason in TARGETS:
        marks = [pytest.mark.skipif(reason is not None, reason=str(reason)),
                 getattr(pytest.mark, backend_of(tid))]
        for k, case in enumerate(_cases_for(tid)):
            out.append(pytest.param(tid, target, k, case, marks=marks,
                                    id=f"{tid}-{case.op}-{case.id}"))
        if tid == "opencl_portable_kernels":
            continue
        for case in CASES:
            gap = _gap(tid, case)
            if gap is not None:
                xfail = pytest.mark.xfail(reason=gap, strict=True)
                out.append(pytest.param(tid, target, None, case, marks=marks + [xfail],
                                        id=f"{tid}-{case.op}-{case.id}"))
    return out


def _tolerance(case, dtype):
    rtol, atol = TOLERANCE.get(dtype, (0.0, 0.0))
    return max(rtol, case.rtol), atol


@pytest.mark.parametrize("target_id,target,index,case", _params())
def test_case_matches_reference(target_id, target, index, case):
    if index is None:  # a known gap: a graph of its own
        suite = Suite([case])
        got, span = suite.run(target)[0], suite.spans[0]
    else:
        suite, got, _ = _chunk_result(target_id, target, index // CHUNK)
        span = suite.spans[index % CHUNK]
    start, n = span
    for k in range(start, start + n):
        what = f"{target_id} {case.op}-{case.id} output {k - start}"
        want = suite.ref[k]
        assert got[k].shape == want.shape, f"{what}: shape {got[k].shape} != {want.shape}"
        assert got[k].dtype == want.dtype, f"{what}: dtype {got[k].dtype} != {want.dtype}"
        if want.dtype.kind in "OSU":  # strings compare exactly
            np.testing.assert_array_equal(got[k], want, err_msg=what)
            continue
        rtol, atol = _tolerance(case, want.dtype.name)
        np.testing.assert_allclose(got[k], want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=what)


def _ledger(name):
    path = HERE / name
    return {ln.split("#")[0].strip() for ln in path.read_text().splitlines()} - {""}


def _host_cases(target_id, target):
    """``(cases run on the host, their op names, how many)`` over every chunk. The codegen
    backends (opencl, cuda) name each fallback node (``c<i>_<op>`` -> case i); llvm lists
    only op names and a count, so there the case set is None."""
    cases = _cases_for(target_id)
    chunks = range((len(cases) + CHUNK - 1) // CHUNK)
    keys, ops, count = set(), set(), 0
    for c in chunks:
        stats = _chunk_result(target_id, target, c)[2]
        found = stats["fallback_ops"]
        if isinstance(found, dict):
            keys |= {_key(cases[c * CHUNK + int(node[1:].split("_", 1)[0])]) for node in found}
            ops |= {v.split(":")[0] for v in found.values()}
            count += stats["num_fallback_ops"]
        else:
            keys = None
            ops |= set(found)
            count += stats["num_fallback_kernels"]
    return keys, ops, count


LEDGER_TARGETS = [pytest.param(tid, target, id=tid, marks=pytest.mark.skipif(
    reason is not None, reason=str(reason))) for tid, target, reason in TARGETS
    if backend_of(tid) in ("llvm", "opencl") and tid != "opencl_portable_kernels"]


@pytest.mark.parametrize("target_id,target", LEDGER_TARGETS)
def test_host_fallback_cases_only_shrink(target_id, target):
    """The cases this target runs on the host are exactly the ledger's: a new one means a
    kernel rule regressed; one gone means the ledger must drop it (so it only shrinks)."""
    name = f"host_fallback_{backend_of(target_id)}.txt"
    ledger = _ledger(name)
    by_key = {_key(c): c for c in _cases_for(target_id)}
    unknown = sorted(ledger - set(by_key))
    assert not unknown, f"{name}: entries naming no case: {unknown}"
    keys, ops, count = _host_cases(target_id, target)
    grew = f"(the ledger {name} may only shrink): give them a kernel rule"
    if keys is not None:
        assert not keys - ledger, \
            f"{target_id}: cases newly on the host: {sorted(keys - ledger)} {grew}"
        assert not ledger - keys, f"{target_id}: cases now compiled: {sorted(ledger - keys)}; " \
            f"remove them from {name}"
    else:  # llvm: op names and a count
        listed_ops = {by_key[k].op for k in ledger}
        assert not ops - listed_ops, \
            f"{target_id}: ops newly on the host: {sorted(ops - listed_ops)} {grew}"
        assert count <= len(ledger), f"{target_id}: {count} cases on the host, {len(ledger)} " \
            f"listed: a case of {sorted(ops)} regressed {grew}"
        gone = sorted(k for k in ledger if by_key[k].op not in ops)
        assert not gone, f"{target_id}: cases now compiled: {gone}; remove them from {name}"
        assert count == len(ledger), f"{target_id}: only {count} of the {len(ledger)} listed " \
            f"cases run on the host; remove the ones that now compile from {name}"
    print(f"{target_id}: {count} of {len(by_key)} cases on the host fallback ({len(ops)} ops)")


def test_every_op_with_a_reference_kernel_has_a_case():
    """Ops without a case (core's and installed plugins') are listed in uncased_ops.txt (which
    may only shrink) or are in CANNOT_CASE with the reason."""
    ops = {n for n in list_op_names() if get_op(n).has_attr("FReference")}
    uncased = ops - {c.op for c in ALL_CASES} - set(CANNOT_CASE) - TEST_ONLY_OPS
    ledger = _ledger("uncased_ops.txt")
    assert not uncased - ledger, \
        f"ops without a conformance case: {sorted(uncased - ledger)}; add one to " \
        "conformance_cases.py"
    assert not (ledger & ops) - uncased, \
        f"ops now cased: {sorted((ledger & ops) - uncased)}; remove them from uncased_ops.txt"
    assert sorted(set(CANNOT_CASE) - ops) == [], "stale CANNOT_CASE entries"
    print(f"{len(ops)} ops with a reference kernel, {len(ops) - len(uncased)} cased, "
          f"{len(uncased)} not yet: {sorted(uncased)}")
