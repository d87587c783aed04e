"""Reshapes on llvm are views, not copy kernels.

A 1-D conv imports as reshape (N, C, W) -> (N, C, 1, W), conv2d, reshape back. The reshape
of the graph input folds into the conv's kernel (an index map its schedule inlines) and the
reshape of a kernel's output becomes an alias of that output's buffer in the executor plan:
one kernel instead of three. Checked against onnxruntime, on the plan (no kernel overwrites a
buffer whose value, a view's included, is still to be read) and through
``export_c`` (the standalone C library lays out the same buffers).
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tvm")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from test_llvm_conv_shapes import _model  # noqa: E402  (one-Conv ONNX model builder)

import nnvm  # noqa: E402

CONV1D = {
    # id: (input shape, weight shape, strides, pads, dilations, group)
    "onnx_test_1x128x1": ((1, 128, 1), (1, 128, 1), (1,), (0, 0), (1,), 1),
    "odd_padded": ((2, 5, 37), (7, 5, 3), (1,), (2, 2), (1,), 1),
    "strided_dilated": ((1, 9, 41), (6, 9, 3), (2,), (1, 0), (2,), 1),
    "depthwise": ((1, 12, 31), (12, 1, 3), (1,), (1, 1), (1,), 12),
}


def _run(model, feed):
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    shapes = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shapes)
    lib = nnvm.compiler.build(graph, target="llvm", shape=shapes, params=params)
    got = lib.run(**feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    return lib


def _kernels(lib) -> list[list[str]]:
    return [s["group"] for s in lib._plan["steps"] if s["kind"] == "kernel"]


def _clobbered_reads(lib) -> list:
    """Reads of an entry whose buffer holds another value or none yet (run the plan's steps
    over the storage ids: a view and its source are one value, written once)."""
    plan, idx = lib._plan, lib.graph.index
    rptr, entries = idx.entry_rptr, plan["entries"]
    steps = []
    for s in plan["steps"]:
        root = max(s["nodes"]) if s["kind"] == "kernel" else s["node"]
        outs = set(range(rptr[root], rptr[root + 1]))
        ins = [a["entry"] for a in s.get("args", []) if "entry" in a and a["entry"] not in outs]
        steps.append((s.get("func", "reference"), ins + s.get("inputs", []), outs))
    written = set().union(*(o for _, _, o in steps))
    views = {rptr[nid]: rptr[idx.inputs[nid][0][0]] + idx.inputs[nid][0][1]
             for nid, node in enumerate(idx.nodes) if node.op is not None
             and str(rptr[nid]) in entries and rptr[nid] not in written}

    def value(e):
        while e in views:
            e = views[e]
        return e
    owner, bad = {}, []
    for name, ins, outs in steps:
        for e in ins:
            sid = entries[str(e)]["storage"]
            if sid >= 0 and owner.get(sid) != value(e):
                bad.append((name, e, sid))
        for e in outs:
            owner[entries[str(e)]["storage"]] = e
    return bad


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", sorted(CONV1D))
def test_conv1d_is_one_kernel(case, bias):
    xs, ws, strides, pads, dil, group = CONV1D[case]
    x = np.random.default_rng(2).standard_normal(xs).astype("float32")
    lib = _run(_model(xs, ws, strides, pads, dil, group, bias), {"x": x})
    assert _kernels(lib) == [["reshape", "conv2d"]], _kernels(lib)
    assert not _clobbered_reads(lib)
    _assert_template_sees_the_image(lib, xs)


def _assert_template_sees_the_image(lib, xs):
    """The conv template schedules the (N, C, 1, W) image it knows (not a fallback on a
    reshape it cannot match), and the kernel's argument is the (N, C, W) input again."""
    import tvm
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.compiler.target import vector_lanes

    tgt = tvm.target.Target(lib._plan["tvm_target"])
    lanes = vector_lanes(tgt)
    with tgt:
        (gl,) = kernel_lowerings(lib.graph, lib.params, lanes, tgt)
        assert list(gl.viewed) == [gl.inputs[0]]
        info = gl.schedule_info(lanes)
        func = gl.unview(schedule(gl.primfunc(lanes), info))
    assert info.applied
    assert tuple(int(d) for d in func.params[0].shape) == xs


def _graph(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(
        nodes, "views", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                         for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_view_of_a_kernel_output_outlives_its_source():
    """A chain of views of the first conv's output (one of them a graph output) is read by
    the second conv and by the add fused after it: no kernel, and no other value written
    into their buffer before the last of those reads."""
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((6, 3, 3, 3)).astype("float32")
    w2 = rng.standard_normal((6, 6, 1, 1)).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["y", "s1"], ["v"]),
             helper.make_node("Reshape", ["v", "s2"], ["v2"]),
             helper.make_node("Conv", ["v2", "w2"], ["z"]),
             helper.make_node("Add", ["v2", "z"], ["out"])]
    inits = [("w1", w1), ("w2", w2), ("s1", np.array([1, 6, 35], np.int64)),
             ("s2", np.array([1, 6, 35, 1], np.int64))]
    model = _graph(nodes, [("x", [1, 3, 5, 7])], [("out", [1, 6, 35, 1]), ("v", [1, 6, 35])],
                   inits)
    lib = _run(model, {"x": rng.standard_normal((1, 3, 5, 7)).astype("float32")})
    assert _kernels(lib) == [["conv2d"], ["conv2d", "broadcast_add"]], _kernels(lib)
    assert not _clobbered_reads(lib)


def test_input_reshape_read_twice_stays_a_kernel():
    """A reshape of a graph input read by two kernels cannot fold into either (only a
    group's root leaves it): it stays a copy, and both convs read it correctly."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((4, 5, 1, 3)).astype("float32")
    w2 = rng.standard_normal((3, 5, 1, 1)).astype("float32")
    nodes = [helper.make_node("Reshape", ["x", "s"], ["x4"]),
             helper.make_node("Conv", ["x4", "w1"], ["a"], pads=[0, 1, 0, 1]),
             helper.make_node("Conv", ["x4", "w2"], ["b"])]
    inits = [("w1", w1), ("w2", w2), ("s", np.array([2, 5, 1, 19], np.int64))]
    model = _graph(nodes, [("x", [2, 5, 19])], [("a", [2, 4, 1, 19]), ("b", [2, 3, 1, 19])],
                   inits)
    lib = _run(model, {"x": rng.standard_normal((2, 5, 19)).astype("float32")})
    assert ["reshape"] in _kernels(lib)


def test_general_reshape_of_an_input_stays_a_kernel():
    """A reshape that moves elements between non-unit axes ((1, 4, 6) -> (1, 2, 2, 6)) is
    not a unit-axis view the conv can be scheduled over: it stays a copy kernel."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((3, 2, 1, 3)).astype("float32")
    nodes = [helper.make_node("Reshape", ["x", "s"], ["x4"]),
             helper.make_node("Conv", ["x4", "w"], ["y"], pads=[0, 1, 0, 1])]
    inits = [("w", w), ("s", np.array([1, 2, 2, 6], np.int64))]
    model = _graph(nodes, [("x", [1, 4, 6])], [("y", [1, 3, 2, 6])], inits)
    lib = _run(model, {"x": rng.standard_normal((1, 4, 6)).astype("float32")})
    assert _kernels(lib) == [["reshape"], ["conv2d"]], _kernels(lib)


def test_export_c_runs_the_aliased_plan(tmp_path):
    """The standalone C library (one arena laid out by the plan's storage) gives the
    module's outputs bit for bit on a 1-D conv with its reshapes folded and aliased."""
    from test_llvm_export_c import CC, REASON, _export_and_run

    if REASON is not None or CC is None:
        pytest.skip(str(REASON or "no C compiler (cc) on PATH"))
    xs, ws, strides, pads, dil, group = CONV1D["odd_padded"]
    feed = {"x": np.random.default_rng(3).standard_normal(xs).astype("float32")}
    lib = _run(_model(xs, ws, strides, pads, dil, group, True), feed)
    lib.set_num_threads(1)
    _, ref, got = _export_and_run(lib, feed, tmp_path)
    for r, g in zip(ref, got):
        assert g.tobytes() == r.tobytes()
