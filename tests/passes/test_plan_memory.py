"""PlanMemory: sharing, in-place reuse, validity (liveness simulation and an executor that
really runs in the planned buffers), dtype widths, device pools, match-range search."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.errors import NNVMError
from nnvm.interpreter import run_graph
from nnvm.ir import Graph
from nnvm.pass_manager import get_pipeline
from nnvm.runtime.memory import activation_bytes
from nnvm_passes.plan_memory import check_memory_plan


def _plan(s, shapes: dict, dtype="float32", **attrs) -> Graph:
    g = Graph(s.outputs, attrs)
    return g.apply(["InferShape", "InferType", "PlanMemory"], shape_inputs=shapes,
                   dtype_inputs={k: dtype for k in shapes})


def _run_in_plan(graph: Graph, feed: dict) -> list[np.ndarray]:
    """Execute with every entry stored in its planned buffer (views of one bytearray per
    storage id). A plan that lets two live values share a buffer corrupts the results."""
    idx = graph.index
    rptr = idx.entry_rptr
    sid, shapes, dtypes = (graph.attrs[k] for k in ("storage_id", "shape", "dtype"))
    sizes: dict[int, int] = {}
    for e, s in enumerate(sid):
        if s >= 0:
            nbytes = int(np.prod(shapes[e], dtype=np.int64)) * np.dtype(dtypes[e]).itemsize
            sizes[s] = max(sizes.get(s, 0), nbytes)
    buffers = {s: bytearray(n) for s, n in sizes.items()}
    views: list = [None] * idx.num_node_entries
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            views[rptr[nid]] = np.asarray(feed[node.name])
            continue
        args = [views[rptr[i] + k] for i, k, _ in idx.inputs[nid]]
        args = [a.copy() for a in args]  # the kernel reads its inputs before writing
        res = node.op.get_attr("FReference")(node.attrs, *args)
        res = res if isinstance(res, (tuple, list)) else (res,)
        for i, r in enumerate(res):
            e = rptr[nid] + i
            view = np.frombuffer(buffers[sid[e]], dtype=dtypes[e],
                                 count=int(np.prod(shapes[e], dtype=np.int64)))
            view = view.reshape(shapes[e])
            view[...] = r
            views[e] = view
    return [views[e].copy() for e in idx.output_entries]


def _check(graph: Graph, feed: dict) -> dict:
    stats = check_memory_plan(graph)
    want = run_graph(graph, feed)
    got = _run_in_plan(graph, feed)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-6)
    return stats


def _chain(n: int):
    x = sym.Variable("x")
    y = x
    for i in range(n):
        y = sym.tanh(y) if i % 2 else sym.relu(y * 2.0)
    return y


def test_chain_shares_and_works_in_place(rng):
    g = _plan(_chain(20), {"x": (8, 16)})
    sids = g.attrs["storage_id"]
    assert sids[0] == -2  # the input is external
    assert len({s for s in sids if s >= 0}) <= 2
    assert sum(i >= 0 for i in g.attrs["storage_inplace_index"]) >= 15
    stats = _check(g, {"x": rng.standard_normal((8, 16)).astype("float32")})
    planned, naive = activation_bytes(g)
    assert planned == stats["planned_bytes"] == g.attrs["storage_allocated_bytes"]
    print(f"chain of 20: planned {planned} B / naive {naive} B = {planned / naive:.3f}")
    assert planned / naive <= 0.1


def _diamond():
    x = sym.Variable("x")
    a = sym.exp(x)
    b, c = sym.tanh(a), sym.sigmoid(a)
    d = b * c + a
    return sym.relu(d) - x


def _multi_output():
    x = sym.Variable("x")
    parts = sym.split(x, indices_or_sections=3, axis=1)
    return sym.Group([sym.exp(parts[0]) + parts[2], sym.tanh(parts[1])])


def _outputs_inside():
    x = sym.Variable("x")
    a = sym.exp(x, name="a")
    b = sym.relu(a, name="b")  # a is an output: b must not overwrite it
    return sym.Group([a, sym.tanh(b), b])


def _identity_reuse():
    x = sym.Variable("x")
    a = sym.exp(x, name="a")
    c = sym.copy(a, name="c")  # identity: may alias a although a is read again
    return sym.tanh(c) + a


def _ignored_inputs():
    x = sym.Variable("x")
    a = sym.exp(x)
    z = sym.zeros_like(a)  # reads only a's shape
    return sym.relu(z + sym.tanh(a)) * a


def _mlp():
    x = sym.Variable("x")
    h = sym.relu(sym.dense(x, units=32, name="fc1"))
    h = sym.relu(sym.dense(h, units=32, name="fc2")) + h
    return sym.softmax(sym.dense(h, units=10, name="fc3"))


GRAPHS = {"diamond": (_diamond, (4, 6)), "multi_output": (_multi_output, (4, 6)),
          "outputs_inside": (_outputs_inside, (4, 6)), "identity": (_identity_reuse, (4, 6)),
          "ignored_inputs": (_ignored_inputs, (4, 6)), "mlp": (_mlp, (8, 12)),
          "chain": (lambda: _chain(7), (4, 6))}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_plan_is_valid(name, rng):
    make, shape = GRAPHS[name]
    s = make()
    g = _plan(s, {"x": shape})
    feed = {"x": rng.standard_normal(shape).astype("float32")}
    for v in s.list_input_variables():
        if v.name != "x":
            feed[v.name] = rng.standard_normal(
                g.attrs["shape"][g.index.entry_id(g.index.node_id(v.name))]).astype("float32")
    stats = _check(g, feed)
    assert stats["planned_bytes"] <= stats["naive_bytes"]


def test_outputs_are_never_overwritten():
    g = _plan(_outputs_inside(), {"x": (2, 3)})
    idx = g.index
    a = idx.entry_id(idx.node_id("a"))
    b = idx.entry_id(idx.node_id("b"))
    assert g.attrs["storage_inplace_index"][b] == -1
    assert g.attrs["storage_id"][a] != g.attrs["storage_id"][b]


def test_identity_op_aliases_its_input_while_it_is_still_read():
    g = _plan(_identity_reuse(), {"x": (2, 3)})
    idx = g.index
    a, c = (idx.entry_id(idx.node_id(n)) for n in ("a", "c"))
    assert g.attrs["storage_id"][a] == g.attrs["storage_id"][c]
    assert g.attrs["storage_inplace_index"][c] == 0


def test_unused_output_gets_storage_and_is_released_at_once():
    x = sym.Variable("x")
    parts = sym.split(x, indices_or_sections=2, axis=0, name="parts")
    g = _plan(sym.exp(parts[0]), {"x": (4, 3)})
    idx = g.index
    unused = idx.entry_id(idx.node_id("parts"), 1)
    assert g.attrs["storage_id"][unused] >= 0
    assert g.attrs["storage_inplace_index"][unused] == -2
    check_memory_plan(g)


def test_byte_sizes_follow_the_dtype():
    small = _plan(_chain(6), {"x": (4, 8)}, dtype="float32")
    wide = _plan(_chain(6), {"x": (4, 8)}, dtype="float64")
    assert wide.attrs["storage_allocated_bytes"] == 2 * small.attrs["storage_allocated_bytes"]


def _inplace_cast_op() -> str:
    """A cast that declares FInplaceOption, to exercise the dtype-width rule (NNVM's cast
    has none). Registered once, under a name no real op uses."""
    from nnvm.errors import OpNotFoundError
    from nnvm.op import OpPattern, get_op, register_op
    from nnvm.params import Param

    name = "_test_inplace_cast"
    try:
        get_op(name)
    except OpNotFoundError:
        register_op(name, doc="cast with in-place option (tests only)", inputs=("data",),
                    params=[Param("dtype", "dtype")],
                    shape=lambda attrs, ins, outs: (ins, [ins[0]]),
                    dtype=lambda attrs, ins, outs: (ins, [attrs["dtype"]]),
                    reference=lambda attrs, x: x.astype(attrs["dtype"]),
                    inplace=lambda attrs: [(0, 0)], pattern=OpPattern.ELEMWISE)
    return name


@pytest.mark.parametrize("dtype, shared", [("int32", True), ("float64", False),
                                           ("float16", False)])
def test_in_place_needs_equal_element_width(dtype, shared, rng):
    x = sym.Variable("x")
    t = sym.tanh(x, name="t")
    y = sym.exp(getattr(sym, _inplace_cast_op())(t * 3.0, dtype=dtype, name="c"))
    g = _plan(y, {"x": (3, 3)})
    idx = g.index
    src = g.index.nodes[idx.node_id("c")].inputs[0]
    a, c = idx.entry_id(src), idx.entry_id(idx.node_id("c"))
    assert (g.attrs["storage_id"][a] == g.attrs["storage_id"][c]) == shared
    assert (g.attrs["storage_inplace_index"][c] == 0) == shared
    _check(g, {"x": rng.standard_normal((3, 3)).astype("float32")})


def test_match_range_zero_disables_sharing_and_search_keeps_the_smallest():
    s = _mlp()
    none = _plan(s, {"x": (8, 12)}, storage_match_range=0)
    n_ops = sum(n.num_outputs for n in none.index.nodes if n.op is not None)
    inplace = sum(i >= 0 for i in none.attrs["storage_inplace_index"])
    assert len({v for v in none.attrs["storage_id"] if v >= 0}) == n_ops - inplace
    best = _plan(s, {"x": (8, 12)})
    for r in (1, 2, 4, 8, 16):
        fixed = _plan(s, {"x": (8, 12)}, storage_match_range=r, storage_auto_search=False)
        check_memory_plan(fixed)
        assert best.attrs["storage_allocated_bytes"] <= fixed.attrs["storage_allocated_bytes"]
    assert best.attrs["storage_allocated_bytes"] < none.attrs["storage_allocated_bytes"]


def test_devices_get_separate_pools(rng):
    x = sym.Variable("x")
    y = x
    for i in range(8):
        y = sym.exp(y * 0.5) if i % 2 else sym.tanh(y)
    g = Graph(y.outputs).apply(["InferShape", "InferType"], shape_inputs={"x": (4, 4)},
                               dtype_inputs={"x": "float32"})
    devices = ["gpu" if i % 4 < 2 else "cpu" for i in range(g.index.num_nodes)]
    g = g.apply("PlanMemory", device=devices)
    sids = g.attrs["storage_id"]
    rptr = g.index.entry_rptr
    owner = {}
    for nid in range(g.index.num_nodes):
        for e in range(rptr[nid], rptr[nid + 1]):
            if sids[e] >= 0:
                assert owner.setdefault(sids[e], devices[nid]) == devices[nid]
    assert set(owner.values()) == {"cpu", "gpu"}
    _check(g, {"x": rng.standard_normal((4, 4)).astype("float32")})


def test_stale_attributes_are_reported():
    g = Graph(_chain(3).outputs).apply(["InferShape", "InferType"],
                                       shape_inputs={"x": (2, 2)}, dtype_inputs={"x": "float32"})
    with pytest.raises(NNVMError, match="stale"):
        g.apply("PlanMemory", shape=g.attrs["shape"][:2])
    with pytest.raises(NNVMError, match="InferShape"):
        Graph(_chain(3).outputs).apply("PlanMemory")


def test_build_runs_the_plan_and_module_reports_it(rng):
    assert get_pipeline("default")[-1] == "PlanMemory"
    lib = nnvm.compiler.build(_mlp(), target="reference", shape={"x": (8, 12)}, opt_level=0)
    stats = lib.stats()
    assert stats["activation_bytes"] < stats["activation_bytes_naive"]
    print(f"mlp: planned {stats['activation_bytes']} B / naive "
          f"{stats['activation_bytes_naive']} B")
