"""Models whose shapes depend on data (NonZero, NonMaxSuppression, TopK over their results)
import with ``shape=`` given and match onnxruntime on ``reference`` and on compiled targets,
where the static part is compiled and the data-dependent tail runs on the host
(``nnvm.compiler.dynamic_region``); the artifact exports and loads in a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import nnvm  # noqa: E402
from nnvm.compiler.dynamic_region import check_host_tail_free  # noqa: E402
from nnvm_onnx.errors import NeedsConstantError  # noqa: E402

import run_time_shape_models  # noqa: E402
from onnx_test_helpers import make_model, ort_run  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
TARGETS = ["reference", "llvm", "opencl"]


def _nonzero_model(overridable_threshold: bool = False):
    """Static head (relu, scale), then NonZero -> Gather -> CumSum: one static output and two
    whose length is the number of elements above a threshold (an initializer, optionally
    also listed as a graph input: an overridable default)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Mul", ["r", "two"], ["scaled"]),
             helper.make_node("Greater", ["r", "th"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"], name="find"),
             helper.make_node("Gather", ["scaled", "nz"], ["picked"], axis=0),
             helper.make_node("CumSum", ["picked", "one"], ["running"])]
    inits = [helper.make_tensor("th", F, [], [0.3]), helper.make_tensor("two", F, [], [2.0]),
             helper.make_tensor("one", I64, [], [1])]
    inputs = [helper.make_tensor_value_info("x", F, [24])]
    if overridable_threshold:
        inputs.append(helper.make_tensor_value_info("th", F, []))
    return make_model(nodes, inputs,
                      [helper.make_tensor_value_info("running", F, [1, None]),
                       helper.make_tensor_value_info("scaled", F, [24]),
                       helper.make_tensor_value_info("picked", F, [1, None])], inits)


def _nms_model():
    """Boxes and scores computed by static ops, then NonMaxSuppression, the kept boxes
    gathered and their scores sorted by TopK with k from the kept count."""
    nodes = [helper.make_node("Add", ["raw_boxes", "offset"], ["boxes"]),
             helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou",
                                                    "score_th"], ["sel"], name="nms"),
             helper.make_node("Gather", ["sel", "col"], ["box_idx"], axis=1),
             helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"]),
             helper.make_node("Gather", ["boxes2d", "box_idx"], ["kept"], axis=0),
             helper.make_node("Flatten", ["scores"], ["flat_scores"], axis=0),
             helper.make_node("Squeeze", ["flat_scores", "zero"], ["scores1d"]),
             helper.make_node("Gather", ["scores1d", "box_idx"], ["kept_scores2"], axis=0),
             helper.make_node("Squeeze", ["kept_scores2", "one"], ["kept_scores"]),
             helper.make_node("TopK", ["kept_scores", "k"], ["top", "top_idx"])]
    inits = [helper.make_tensor("offset", F, [4], [0.0, 0.0, 1.0, 1.0]),
             helper.make_tensor("max_out", I64, [1], [5]),
             helper.make_tensor("iou", F, [1], [0.4]),
             helper.make_tensor("score_th", F, [1], [0.3]),
             helper.make_tensor("col", I64, [1], [2]),
             helper.make_tensor("zero", I64, [1], [0]),
             helper.make_tensor("one", I64, [1], [1]),
             helper.make_tensor("k", I64, [1], [2])]
    return make_model(nodes, [helper.make_tensor_value_info("raw_boxes", F, [1, 12, 4]),
                              helper.make_tensor_value_info("logits", F, [1, 1, 12])],
                      [helper.make_tensor_value_info("kept", F, [None, 1, 4]),
                       helper.make_tensor_value_info("top", F, [None]),
                       helper.make_tensor_value_info("top_idx", I64, [None])], inits)


def _feeds():
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 4, size=(1, 12, 2)).astype("float32")
    return {
        "nonzero": {"x": rng.standard_normal(24).astype("float32")},
        "nms": {"raw_boxes": np.concatenate([corners, corners], axis=2),
                "logits": rng.standard_normal((1, 1, 12)).astype("float32")},
        **{name: run_time_shape_models.feed(name) for name in run_time_shape_models.MODELS},
    }


#: the last two read shapes, K and bounds at run time (nnvm.ops.dynamic_shape)
MODELS = {"nonzero": _nonzero_model, "nms": _nms_model, **run_time_shape_models.MODELS}


def _require(target: str) -> None:
    """Skip with the backend's own reason where ``target`` cannot build here."""
    if target == "llvm":
        pytest.importorskip("tvm")
    elif target != "reference":
        from nnvm.backend import get_backend

        try:
            reason = get_backend(target).is_available()
        except nnvm.NNVMError as exc:  # the plugin is not installed
            reason = str(exc)
        if reason:
            pytest.skip(f"{target} unavailable: {reason}")


def _build(name: str, target: str):
    _require(target)
    feed = _feeds()[name]
    shape = {k: v.shape for k, v in feed.items()}
    graph, params = nnvm.frontend.from_onnx(MODELS[name](), shape=shape)
    return nnvm.compiler.build(graph, target=target, shape=shape, params=params), feed


def _assert_matches(outs, want):
    assert len(outs) == len(want)
    for got, ref in zip(outs, want):
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_data_dependent_model_matches_onnxruntime(name, target):
    lib, feed = _build(name, target)
    want = ort_run(MODELS[name](), feed)
    _assert_matches(lib.run(**feed), want)
    assert lib.output_names == [o.name for o in MODELS[name]().graph.output]
    if target != "reference":  # compiled static part, data-dependent tail on the host
        assert lib.host_nodes and lib.stats()["host_nodes"] == len(lib.host_nodes)
        assert lib.static.target.split()[0] == target and lib.tail.target == "reference"
        assert None in lib.output_shapes  # the tail's shapes are known only at run time
        assert hasattr(lib, "set_num_threads") == hasattr(lib.static, "set_num_threads")
        stats = lib.stats()  # host steps are counted as the backend counts its fallbacks
        fallbacks = stats.get("num_fallback_kernels", stats.get("num_fallback_ops"))
        assert fallbacks >= stats["host_nodes"]
        ops = stats["fallback_ops"]
        listed = ops if isinstance(ops, list) else [v.split(":")[0] for v in ops.values()]
        assert {"non_zero", "non_max_suppression"} & set(listed)


def test_tail_shapes_follow_each_run():
    """Two inputs with a different number of selected elements: each run's outputs have
    that run's length (nothing is sized at build time)."""
    lib, feed = _build("nonzero", "llvm")
    for x in (np.linspace(-1, 1, 24, dtype="float32"), np.ones(24, "float32")):
        want = ort_run(_nonzero_model(), {"x": x})
        _assert_matches(lib.run(x=x), want)


@pytest.mark.parametrize("target", ["reference", "llvm"])
@pytest.mark.parametrize("name", sorted(run_time_shape_models.MODELS))
def test_run_time_shapes_follow_each_run(name, target):
    """Inputs selecting different counts: every shape read at run time is that run's, and on
    a compiled target the ops reading them are in the host tail."""
    lib, _ = _build(name, target)
    for seed in (1, 2, 3):
        feed = run_time_shape_models.feed(name, seed)
        _assert_matches(lib.run(**feed), ort_run(MODELS[name](), feed))
    if target != "reference":
        tail_ops = {n.op.name for n in lib.tail.graph.index.nodes if n.op is not None}
        want = {"shape_of", "dynamic_topk"} if name == "clamped_topk" else {
            "shape_of", "size_of", "constant_of_shape", "range", "dynamic_reshape",
            "dynamic_slice", "dynamic_split", "dynamic_expand", "dynamic_tile"}
        assert want <= tail_ops


@pytest.mark.parametrize("limits", [{}, {"_MAX_ROUNDS": 1}, {"_MAX_PAIRS": -1}],
                         ids=["overlap-pairs", "pairs-one-by-one", "blocked"])
@pytest.mark.parametrize("spread", [30.0, 400.0], ids=["dense", "sparse"])
def test_nms_over_many_boxes_matches_onnxruntime(spread, limits, monkeypatch):
    """NonMaxSuppression over 3,000 boxes in 2 classes, with score ties: every way the kernel
    finds suppressions (the overlapping-pairs list settled in rounds of array operations or,
    past the rounds, box by box; the blocked matrix it falls back to when boxes overlap too
    much) gives onnxruntime's selection in its order."""
    from nnvm.ops import vision

    for name, value in limits.items():
        monkeypatch.setattr(vision, name, value)
    rng = np.random.default_rng(7)
    corner = rng.uniform(0, spread, (1, 3000, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(0.5, 6, (1, 3000, 2))], axis=2)
    feed = {"boxes": boxes.astype("float32"),
            "scores": np.round(rng.uniform(0, 1, (1, 2, 3000)), 2).astype("float32")}
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou"], ["sel"])
    model = make_model([node], [helper.make_tensor_value_info("boxes", F, [1, 3000, 4]),
                                helper.make_tensor_value_info("scores", F, [1, 2, 3000])],
                       [helper.make_tensor_value_info("sel", I64, [None, 3])],
                       [helper.make_tensor("limit", I64, [1], [2500]),
                        helper.make_tensor("iou", F, [1], [0.45])])
    graph, params = nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})
    lib = nnvm.compiler.build(graph, target="reference", params=params)
    _assert_matches(lib.run(**feed), ort_run(model, feed))


@pytest.mark.parametrize("limits", [{}, {"_MAX_PAIRS": -1}], ids=["overlap-pairs", "blocked"])
@pytest.mark.parametrize("center", [0, 1], ids=["corners", "center-size"])
def test_nms_decides_borderline_iou_as_onnxruntime(center, limits, monkeypatch):
    """400 pairs of boxes whose IoU lies within float32 rounding of the threshold: the
    kernel computes IoU in float32 with onnxruntime's operations, so each pair is kept or
    suppressed as onnxruntime does (in float64, most of them went the other way)."""
    from nnvm.ops import vision

    for name, value in limits.items():
        monkeypatch.setattr(vision, name, value)
    rng = np.random.default_rng(3)
    n, iou = 400, np.float32(0.55)
    y, x = rng.uniform(0, 100, n), rng.uniform(0, 100, n)
    h, w = rng.uniform(1, 50, n), rng.uniform(1, 50, n)
    shift = w - float(iou) * 2 * w / (1 + float(iou))  # equal boxes overlapping by IoU ~ iou
    a, b = np.stack([y, x, y + h, x + w], 1), np.stack([y, x + shift, y + h, x + shift + w], 1)
    boxes = np.stack([a, b], 1)
    if center:
        boxes = np.concatenate([(boxes[..., 1::-1] + boxes[..., :1:-1]) / 2,
                                boxes[..., :1:-1] - boxes[..., 1::-1]], axis=-1)
    feed = {"boxes": boxes.astype("float32"),
            "scores": np.tile(np.array([[[0.9, 0.8]]], "float32"), (n, 1, 1))}
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou"], ["sel"],
                            center_point_box=center)
    model = make_model([node], [helper.make_tensor_value_info("boxes", F, [n, 2, 4]),
                                helper.make_tensor_value_info("scores", F, [n, 1, 2])],
                       [helper.make_tensor_value_info("sel", I64, [None, 3])],
                       [helper.make_tensor("limit", I64, [1], [2]),
                        helper.make_tensor("iou", F, [1], [iou])])
    graph, params = nnvm.frontend.from_onnx(model, shape={k: v.shape for k, v in feed.items()})
    lib = nnvm.compiler.build(graph, target="reference", params=params)
    want = ort_run(model, feed)
    assert 0 < len(want[0]) - n < n  # some pairs suppressed, some kept: a real borderline
    _assert_matches(lib.run(**feed), want)


def test_shape_of_a_static_tensor_still_folds():
    """Shape/Size of a tensor whose shape is known stay import-time constants."""
    model = make_model([helper.make_node("Shape", ["x"], ["s"]),
                        helper.make_node("Size", ["x"], ["n"])],
                       [helper.make_tensor_value_info("x", F, [2, 6])],
                       [helper.make_tensor_value_info("s", I64, [2]),
                        helper.make_tensor_value_info("n", I64, [])])
    graph, _ = nnvm.frontend.from_onnx(model, shape={"x": (2, 6)})
    assert not [n for n in graph.index.nodes if n.op is not None]


LOAD = textwrap.dedent("""
    import sys, numpy as np, nnvm
    lib = nnvm.runtime.load(sys.argv[1])
    feed = dict(np.load(sys.argv[2]))
    outs = lib.run(**feed)
    np.savez(sys.argv[3], *outs, kind=type(lib).__name__)
""")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_loads_in_a_fresh_process(tmp_path, name, target):
    lib, feed = _build(name, target)
    art, fin, out = tmp_path / "m.nnvm", tmp_path / "in.npz", tmp_path / "out.npz"
    lib.export(str(art))
    np.savez(fin, **feed)
    res = subprocess.run([sys.executable, "-c", LOAD, str(art), str(fin), str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = np.load(out)
    outs = [got[f"arr_{i}"] for i in range(len(lib.output_names))]
    _assert_matches(outs, ort_run(MODELS[name](), feed))
    assert str(got["kind"]) == type(lib).__name__


def test_tampered_wiring_is_refused(tmp_path):
    """The wiring member is checked before the module runs: an output index out of range
    is a SerializationError naming the member, not an IndexError at run time."""
    import json
    import zipfile

    from nnvm.errors import SerializationError
    from nnvm.runtime.artifact import read_artifact

    lib, _ = _build("nonzero", "llvm")
    wiring = json.loads(lib.tail_members()["host_tail.json"])
    wiring["outputs"][0] = ["tail", 99]
    art = tmp_path / "m.nnvm"
    lib.export(str(art))
    artifact = read_artifact(str(art))
    artifact.members["host_tail.json"] = json.dumps(wiring).encode()
    from nnvm.runtime.host_tail import attach_host_tail

    with pytest.raises(SerializationError, match=r"host_tail.json.*outputs\[0\]"):
        attach_host_tail(lib.static, artifact)
    assert zipfile.is_zipfile(art)


def test_static_shapes_true_still_refuses_with_the_node_named():
    """The onnx.backend adapter asks for static graphs and freezes the inputs named."""
    feed = _feeds()["nonzero"]
    with pytest.raises(NeedsConstantError, match="find") as info:
        nnvm.frontend.from_onnx(_nonzero_model(), shape={"x": feed["x"].shape},
                                static_shapes=True)
    assert info.value.inputs == ("x",)


def test_op_needing_a_run_time_shape_names_the_data_dependent_op():
    """A Squeeze without axes drops the dims that are 1, which of a NonZero result is known
    only at run time (Shape, Reshape, TopK... read theirs then: run_time_shape_models.py):
    the error names the NonZero node it follows from, not just the graph input."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="find"),
             helper.make_node("Squeeze", ["nz"], ["flat"], name="drop_ones")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [6])],
                       [helper.make_tensor_value_info("flat", I64, [None])])
    with pytest.raises(NeedsConstantError, match=r"'drop_ones'.*depends on the data.*'find'"):
        nnvm.frontend.from_onnx(model, shape={"x": (6,)})


def test_tools_that_run_only_compiled_steps_name_the_host_tail(tmp_path):
    lib, _ = _build("nonzero", "llvm")
    with pytest.raises(nnvm.NNVMError, match=r"nnvm export-c.*'find'.*Python runtime"):
        check_host_tail_free(lib, "nnvm export-c")
    with pytest.raises(nnvm.NNVMError, match=r"export_c.*'find'.*Python runtime"):
        lib.export_c(str(tmp_path))
    check_host_tail_free(lib.static, "nnvm export-c")  # the compiled part alone passes


def test_overridable_default_survives_export_and_can_be_fed(tmp_path):
    """An initializer listed as a graph input feeds the static part; its default is bound on
    the whole module, travels with the artifact, and a fed value overrides it."""
    _require("llvm")
    model = _nonzero_model(overridable_threshold=True)
    x = _feeds()["nonzero"]["x"]
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": x.shape})
    lib = nnvm.compiler.build(graph, target="llvm", shape={"x": x.shape}, params=params)
    art = tmp_path / "m.nnvm"
    lib.export(str(art))
    loaded = nnvm.runtime.load(str(art))
    for module in (lib, loaded):
        assert module.input_names == ["x"]
        _assert_matches(module.run(x=x), ort_run(model, {"x": x}))
        th = np.array(-0.5, "float32")
        _assert_matches(module.run(x=x, th=th), ort_run(model, {"x": x, "th": th}))


def test_build_warns_once_naming_the_op_and_the_deciding_input(caplog):
    """As backends report their fallbacks: what runs on the host, from which op, and which
    input decides it (freezing it would compile everything)."""
    import logging

    with caplog.at_level(logging.WARNING, logger="nnvm.compiler"):
        lib, _ = _build("nonzero", "llvm")
    lines = [r.getMessage() for r in caplog.records if r.name == "nnvm.compiler"]
    assert len(lines) == 1 and f"{len(lib.host_nodes)} node(s) from 'find' (non_zero)" \
        in lines[0] and "input(s) 'x'" in lines[0]


def _if_model():
    """y = If(flag, x @ W1 (4 columns), x @ W2 (6 columns)): the branches' shapes differ, so
    the output shape depends on the flag's value; each branch holds its own weight."""
    rng = np.random.default_rng(1)
    out = lambda n, c: helper.make_tensor_value_info(n, F, [2, c])  # noqa: E731
    branch = {}
    for name, cols in (("then", 4), ("else", 6)):
        w = helper.make_tensor(f"w_{name}", F, [3, cols],
                               rng.standard_normal(3 * cols).astype("float32"))
        branch[name] = helper.make_graph(
            [helper.make_node("MatMul", ["h", f"w_{name}"], [f"y_{name}"])], name, [],
            [out(f"y_{name}", cols)], initializer=[w])
    nodes = [helper.make_node("Tanh", ["x"], ["h"]),
             helper.make_node("If", ["flag"], ["y"], then_branch=branch["then"],
                              else_branch=branch["else"], name="pick")]
    return make_model(nodes, [helper.make_tensor_value_info("x", F, [2, 3]),
                              helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                      [helper.make_tensor_value_info("y", F, [2, None])])


def test_if_with_data_dependent_shapes_runs_its_bodies_compiled():
    """The If is in the host tail (its output shape depends on the flag), but the branch it
    takes is built for the target on first use, not interpreted."""
    _require("llvm")
    model = _if_model()
    x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    shape = {"x": (2, 3), "flag": ()}
    graph, params = nnvm.frontend.from_onnx(model, shape=shape)
    lib = nnvm.compiler.build(graph, target="llvm", shape=shape, params=params)
    assert "pick" in lib.host_nodes
    for flag in (True, False, True):
        feed = {"x": x, "flag": np.array(flag)}
        _assert_matches(lib.run(**feed), ort_run(model, feed))
    runners = [n.info["subgraph_runner"] for n in lib.tail.graph.index.nodes if n.subgraphs]
    assert runners and runners[0].compiled == 3 and runners[0].interpreted == 0
    assert all("subgraph_runner" not in n.info for n in graph.index.nodes)  # caller's graph
    stats = lib.stats()
    assert "if_else" in stats["control_flow_ops"] and "if_else" not in stats["fallback_ops"]


def test_nothing_to_compile_before_the_tail_gives_the_reference_module(caplog):
    """NonZero straight on the input: no op precedes the data-dependent one, so the whole
    graph is the reference interpreter's, and the build says so."""
    import logging

    _require("llvm")
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="find")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", F, [6])],
                       [helper.make_tensor_value_info("nz", I64, [1, None])])
    graph, params = nnvm.frontend.from_onnx(model, shape={"x": (6,)})
    with caplog.at_level(logging.WARNING, logger="nnvm.compiler"):
        lib = nnvm.compiler.build(graph, target="llvm", shape={"x": (6,)}, params=params)
    assert lib.target == "reference" and "nothing precedes them" in caplog.text
    x = np.array([0, 1, 0, 2, 3, 0], "float32")
    _assert_matches(lib.run(x=x), ort_run(model, {"x": x}))
