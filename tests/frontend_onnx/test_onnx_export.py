"""Issue 17, Build item 6: an optimised graph exported to ONNX (for Netron) passes
onnx.checker, shows each fused kernel as a function and each op without an ONNX
equivalent as a custom-domain node with its attributes, and, where every op maps, runs in
onnxruntime with the original model's results."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import nnvm  # noqa: E402
import nnvm.symbol as sym  # noqa: E402
from dynamic_models import small_cnn, tiny_transformer  # noqa: E402
from nnvm_onnx.exporter import CUSTOM_DOMAIN, FUSED_DOMAIN, export_onnx  # noqa: E402
from onnx_test_helpers import ort_run  # noqa: E402

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models")
CASES = {
    "digits_mlp": (lambda: onnx.load(os.path.join(MODELS, "digits_mlp.onnx")), "data",
                   np.random.default_rng(0).random((2, 64), dtype="float32")),
    "small_cnn": (small_cnn, "x",
                  np.random.default_rng(1).standard_normal((2, 3, 8, 8), "float32")),
    "tiny_transformer": (tiny_transformer, "ids", np.random.default_rng(2).integers(0, 11, (2, 6))),
}


def run_cli(capsys, *argv):
    from nnvm import cli

    code = cli.main([str(a) for a in argv])
    return (code, *capsys.readouterr())


def _run_exported(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


@pytest.mark.parametrize("opt_level", [0, 2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_graph_passes_the_checker_and_matches_onnxruntime(case, opt_level):
    make, name, x = CASES[case]
    model = make()
    graph, params = nnvm.frontend.from_onnx(model, shape={name: x.shape})
    lib = nnvm.compiler.build(graph, "reference", shape={name: x.shape}, params=params,
                              dtype={name: x.dtype.name}, opt_level=opt_level)
    exported = export_onnx(lib)
    onnx.checker.check_model(exported, full_check=True)
    assert [o.name for o in exported.graph.output] == [o.name for o in model.graph.output]
    fused = [n for n in exported.graph.node if n.domain == FUSED_DOMAIN]
    assert (len(fused) > 0) == (opt_level > 0)  # FuseOps runs from level 1
    assert len(exported.functions) == len({n.op_type for n in fused})
    for got, want in zip(_run_exported(exported, {name: x}), ort_run(model, {name: x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_ops_without_an_onnx_equivalent_keep_their_name_and_attributes():
    """``lrn`` has no converter here (NNVM's axis attribute has no ONNX counterpart)."""
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.lrn(sym.relu(x), size=3, alpha=0.5), "reference",
                              shape={"x": (1, 8, 2, 2)}, opt_level=0)
    exported = export_onnx(lib)
    onnx.checker.check_model(exported)
    (custom,) = [n for n in exported.graph.node if n.domain == CUSTOM_DOMAIN]
    assert custom.op_type == "lrn"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in custom.attribute}
    assert attrs["size"] == 3 and attrs["alpha"] == pytest.approx(0.5) and attrs["axis"] == 1
    assert CUSTOM_DOMAIN in {o.domain for o in exported.opset_import}
    shapes = [[d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in exported.graph.output]
    assert shapes == [[1, 8, 2, 2]]  # shapes on the edges


def test_cli_export_onnx_from_an_artifact_and_from_a_model(capsys, tmp_path):
    onnx_path = os.path.join(MODELS, "digits_mlp.onnx")
    out = tmp_path / "opt.onnx"
    code, stdout, err = run_cli(capsys, "export-onnx", onnx_path, "--shape", "data=1,64",
                                "-o", out)
    assert code == 0 and "1 fused kernels as functions" in stdout, err
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    art = tmp_path / "m.nnvm"
    assert run_cli(capsys, "compile", onnx_path, "--shape", "data=1,64", "--target",
                   "reference", "-o", art, "-q")[0] == 0
    code, stdout, _ = run_cli(capsys, "export-onnx", art, "-o", tmp_path / "a.onnx", "-q")
    assert code == 0 and "wrote" in stdout
    x = np.random.default_rng(3).random((1, 64), dtype="float32")
    np.testing.assert_allclose(_run_exported(onnx.load(str(tmp_path / "a.onnx")), {"data": x})[0],
                               ort_run(onnx.load(onnx_path), {"data": x})[0], rtol=1e-5,
                               atol=1e-6)


def test_inspect_onnx_writes_the_export_and_keeps_json_on_stdout(capsys, tmp_path):
    import json

    out = tmp_path / "i.onnx"
    code, stdout, _ = run_cli(capsys, "inspect", os.path.join(MODELS, "digits_mlp.onnx"),
                              "--shape", "data=1,64", "--json", "--onnx", out)
    assert code == 0 and json.loads(stdout)["kind"] == "onnx"
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
