"""Op conformance on the ``opencl`` target: every core op case against the reference target.

The forward cases of tests/core/test_ops_{elemwise,nn,reduce,transform}.py (``CASES``) are
built into ONE graph (each case a disjoint subgraph with its own inputs) and compiled once at
opt_level 0 (no fusion, no constant folding: every op meets its own kernel), so PoCL compiles
one program for the whole suite. Each case is then checked as its own test. Ops without an
OpenCL rule run through the host fallback, and the test says so in its report. On a CPU
device the GEMM/conv cases run the CPU kernel variants; a second, small program builds them
with ``-kernels=portable`` so the tiled (GPU) templates stay tested too.
"""

import importlib.util
import pathlib

import numpy as np
import pytest

import nnvm
from nnvm.ir import Graph, Node, NodeEntry, make_node
from nnvm.op import get_op

HERE = pathlib.Path(__file__).resolve().parents[1] / "core"
FAMILIES = ("elemwise", "nn", "reduce", "transform")


from opencl_devices import REASON, TARGETS  # noqa: E402

pytestmark = pytest.mark.skipif(REASON is not None, reason=f"opencl unavailable: {REASON}")


def _load(family):
    path = HERE / f"test_ops_{family}.py"
    spec = importlib.util.spec_from_file_location(f"_ocl_cases_{family}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CASES = [(f"{fam}:{c.id}:{k}", c) for fam in FAMILIES
         for k, c in enumerate(_load(fam).CASES)]


def _case_graph(i, case):
    op = get_op(case.op)
    attrs = dict(case.attrs)
    arrays = case.arrays("float32")
    if op.is_variadic and "num_args" not in attrs:
        attrs["num_args"] = len(arrays)
    parsed = op.parse_attrs(attrs, f"case {case.id}")
    names = [f"c{i}_{n}" for n in (op.input_names(parsed) if not op.is_variadic else
                                   [f"arg{j}" for j in range(len(arrays))])]
    node = make_node(op.name, [NodeEntry(Node(None, n), 0, 0) for n in names], parsed,
                     f"c{i}_{op.name}")
    visible = op.num_visible_outputs(parsed)
    return [NodeEntry(node, k, 0) for k in range(visible)], dict(zip(names, arrays))


#: ops with a CPU kernel variant: on PoCL (a CPU device) the main suite runs those variants,
#: so these cases are also built with ``-kernels=portable`` to keep the local-memory tiled
#: (GPU) templates tested on the same device.
HEAVY = ("dense", "matmul", "conv2d")
HEAVY_CASES = [(cid, c) for cid, c in CASES if c.op in HEAVY]


def _build_suite(cases, target):
    heads, feed, spans = [], {}, {}
    for i, (cid, case) in enumerate(cases):
        outs, arrays = _case_graph(i, case)
        spans[cid] = (len(heads), len(outs))
        heads += outs
        feed.update(arrays)
    graph = Graph(heads)
    used = set(graph.index.input_names)
    feed = {k: v for k, v in feed.items() if k in used}
    shapes = {k: v.shape for k, v in feed.items()}
    dtypes = {k: v.dtype.name for k, v in feed.items()}
    ref_lib = nnvm.compiler.build(graph, target="reference", shape=shapes, dtype=dtypes,
                                  opt_level=0)
    ref = ref_lib.run(**{k: feed[k] for k in ref_lib.input_names})
    lib = nnvm.compiler.build(graph, target=target, shape=shapes, dtype=dtypes, opt_level=0)
    got = lib.run(**{k: feed[k] for k in lib.input_names})
    return spans, ref, got, lib.stats()


@pytest.fixture(scope="module", params=[t for _, t in TARGETS] or ["opencl"],
                ids=[i for i, _ in TARGETS] or ["opencl"])
def suite(request):
    """One program per usable device (PoCL and Intel's CPU runtime where each works)."""
    return _build_suite(CASES, request.param)


@pytest.fixture(scope="module")
def portable_suite():
    return _build_suite(HEAVY_CASES, "opencl -kernels=portable")


def _check(suite, cid, case):
    spans, ref, got, _ = suite
    start, n = spans[cid]
    for k in range(start, start + n):
        assert got[k].shape == ref[k].shape, f"{cid} output {k - start}: shape"
        assert got[k].dtype == ref[k].dtype, f"{cid} output {k - start}: dtype"
        np.testing.assert_allclose(got[k], ref[k], rtol=max(case.rtol, 1e-4), atol=1e-5,
                                   equal_nan=True, err_msg=f"{cid} output {k - start}")


@pytest.mark.parametrize("cid,case", CASES, ids=[c[0] for c in CASES])
def test_op_case_matches_reference(suite, cid, case):
    _check(suite, cid, case)


@pytest.mark.parametrize("cid,case", HEAVY_CASES, ids=[c[0] for c in HEAVY_CASES])
def test_portable_gemm_conv_kernels_match_reference(portable_suite, cid, case):
    _check(portable_suite, cid, case)


def test_most_core_ops_run_as_kernels(suite):
    """Fallbacks are counted in stats(); every forward op has a rule (NHWC layouts and
    backward-only ops run on the host)."""
    *_, stats = suite
    fallback_ops = {v.split(":")[0] for v in stats["fallback_ops"].values()}
    assert stats["num_fallback_ops"] == len(stats["fallback_ops"])
    backward_only = {o for o in fallback_ops if o.startswith("_")}
    other_layouts = {v.split(":")[0] for v in stats["fallback_ops"].values() if "layout" in v}
    assert fallback_ops - backward_only - other_layouts == set(), stats["fallback_ops"]
    assert stats["num_kernels"] >= len(CASES) - stats["num_fallback_ops"]
