"""The ``nnvm`` command line: every subcommand, its help, errors and the plugin hook."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import nnvm
from nnvm import cli, sym
from nnvm import plugin_manager
from nnvm.errors import OpNotFoundError, SerializationError
from nnvm.serialization.param_dict import save_param_dict
from cli_helpers import error_line, run_cli

DATA = pathlib.Path(__file__).parent / "data"


def _needs_dense():
    try:
        nnvm.op.get_op("dense")
    except OpNotFoundError:
        pytest.skip("op dense is not registered yet")


@pytest.fixture
def mlp_files(tmp_path, rng):
    """NNVM's MLP graph JSON test vector plus a params file and an input .npy."""
    _needs_dense()
    params = {"fc1_weight": rng.standard_normal((16, 8)), "fc1_bias": rng.standard_normal(16),
              "fc2_weight": rng.standard_normal((4, 16)), "fc2_bias": rng.standard_normal(4)}
    params = {k: v.astype("float32") for k, v in params.items()}
    ppath = tmp_path / "mlp.params"
    ppath.write_bytes(save_param_dict(params))
    x = rng.standard_normal((1, 8)).astype("float32")
    xpath = tmp_path / "x.npy"
    np.save(xpath, x)
    h = np.maximum(x @ params["fc1_weight"].T + params["fc1_bias"], 0)
    z = h @ params["fc2_weight"].T + params["fc2_bias"]
    want = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    return DATA / "nnvm_mlp.json", ppath, xpath, want


@pytest.fixture
def relu_artifact(tmp_path):
    x = sym.Variable("x")
    lib = nnvm.compiler.build(sym.relu(x), target="reference", shape={"x": (2, 5)}, opt_level=0)
    path = tmp_path / "relu.nnvm"
    lib.export(str(path))
    return path


# -- help -------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [[], ["compile"], ["run"], ["inspect"], ["plugins"],
                                  ["bench"]])
def test_help_everywhere_with_examples(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv + ["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: nnvm" in out and "examples:" in out


def test_no_command_prints_help(capsys):
    code, out, _ = run_cli(capsys)
    assert code == 2 and "COMMAND" in out


# -- compile / run / inspect on NNVM graph JSON ------------------------------------------------

def test_compile_graph_json_then_run(capsys, tmp_path, mlp_files):
    graph, params, xpath, want = mlp_files
    out_path = tmp_path / "mlp.nnvm"
    code, out, err = run_cli(capsys, "compile", graph, "--params", params, "--target",
                             "reference", "--shape", "x=1,8", "--opt-level", "0", "-o",
                             out_path)
    assert code == 0, err
    assert out_path.exists() and "wrote" in out
    assert "InferShape" in err and "s]" in err  # stage names with elapsed time on stderr
    outdir = tmp_path / "outs"
    code, out, err = run_cli(capsys, "run", out_path, "--input", f"x={xpath}", "--output-dir",
                             outdir)
    assert code == 0, err
    (npy,) = list(outdir.glob("*.npy"))
    np.testing.assert_allclose(np.load(npy), want, rtol=1e-5, atol=1e-6)
    assert npy.stem in out and "(1, 4)" in out and "ms" in out


def test_run_random_json(capsys, relu_artifact):
    code, out, _ = run_cli(capsys, "run", relu_artifact, "--random", "--json", "-q")
    assert code == 0
    report = json.loads(out)
    assert report["outputs"][0]["shape"] == [2, 5] and report["time_ms"] > 0


def test_run_without_inputs_says_how(capsys, relu_artifact):
    code, _, err = run_cli(capsys, "run", relu_artifact)
    assert code == 2 and "--input x=FILE.npy" in err and "--random" in err


def test_inspect_artifact_text_and_json(capsys, tmp_path, mlp_files):
    graph, params, _, _ = mlp_files
    art = tmp_path / "m.nnvm"
    assert cli.main(["compile", str(graph), "--params", str(params), "--target", "reference",
                     "-o", str(art), "-q", "--opt-level", "0"]) == 0
    capsys.readouterr()
    code, out, _ = run_cli(capsys, "inspect", art)
    assert code == 0
    assert "dense" in out and "activation_bytes" in out and "Graph(%x" in out
    assert "shape=(1, 16)" in out  # IR shows shapes
    code, out, _ = run_cli(capsys, "inspect", art, "--json")
    info = json.loads(out)
    assert info["kind"] == "artifact" and info["target"] == "reference"
    assert info["ops"] == {"dense": 2, "relu": 1, "softmax": 1}
    assert info["inputs"] == [{"name": "x", "shape": [1, 8], "dtype": "float32"}]
    assert info["stats"]["param_bytes"] == (16 * 8 + 16 + 4 * 16 + 4) * 4
    assert info["stats"]["num_nodes"] == 4 and "activation_bytes" in info["stats"]


def test_inspect_graph_json_with_shape(capsys):
    code, out, _ = run_cli(capsys, "inspect", DATA / "nnvm_legacy_elemwise.json", "--shape",
                           "y=2,3", "--json")
    assert code == 0
    info = json.loads(out)
    assert info["kind"] == "graph-json"
    assert info["ops"]["relu"] == 1 and info["outputs"][0]["shape"] == [2, 3]
    assert info["stats"]["activation_bytes_naive"] == 5 * 6 * 4


# -- plugins ----------------------------------------------------------------------------------

def test_plugins_text_and_json(capsys):
    code, out, _ = run_cli(capsys, "plugins")
    assert code == 0 and "nnvm" in out and "targets: reference" in out
    code, out, _ = run_cli(capsys, "plugins", "--json")
    infos = {p["name"]: p for p in json.loads(out)}
    assert infos["nnvm"]["available"] is True
    assert "reference" in infos["nnvm"]["provides"]["targets"]
    for p in infos.values():  # an unavailable plugin always says why
        assert p["available"] or p["reason"]


# -- bench ------------------------------------------------------------------------------------

def test_bench_json(capsys, relu_artifact):
    code, out, _ = run_cli(capsys, "bench", relu_artifact, "--repeat", "5", "--warmup", "1",
                           "--json", "-q")
    assert code == 0
    result = json.loads(out)
    assert result["nnvm"]["repeat"] == 5 and result["nnvm"]["median_ms"] > 0


def test_bench_compare_onnxruntime(capsys, tmp_path, relu_artifact):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    code, out, err = run_cli(capsys, "bench", relu_artifact, "--repeat", "5", "--warmup", "1",
                             "--compare", "onnxruntime", "--onnx", path)
    assert code == 0, err
    assert "onnxruntime" in out and "ratio nnvm/onnxruntime" in out
    code, out, _ = run_cli(capsys, "bench", relu_artifact, "--repeat", "3", "--compare",
                           "onnxruntime", "--onnx", path, "--json", "-q")
    result = json.loads(out)
    assert result["ratio"] > 0 and result["max_abs_diff"] == 0.0


def test_bench_compare_needs_onnx_model(capsys, relu_artifact):
    code, _, err = run_cli(capsys, "bench", relu_artifact, "--compare", "onnxruntime", "-q")
    assert code == 2 and "--onnx" in err


# -- ONNX input ---------------------------------------------------------------------------------

def test_compile_onnx(capsys, tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    w = np.arange(12, dtype="float32").reshape(3, 4) / 10
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "mm.onnx"
    onnx.save(model, str(path))
    out_path = tmp_path / "mm.nnvm"
    front = nnvm.frontend.for_path(str(path))
    reason = None if front is None else front.is_available()
    code, out, err = run_cli(capsys, "compile", path, "--shape", "x=2,3", "--target",
                             "reference", "-o", out_path)
    if front is None or reason is not None:
        assert code == 2 and "onnx" in error_line(err).lower()
        pytest.skip(f"ONNX frontend not usable here: {reason or 'not installed'}")
    assert code == 0, err
    x = np.ones((2, 3), "float32")
    (y,) = nnvm.runtime.load(str(out_path)).run(x=x)
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-6)
    code, out, err = run_cli(capsys, "inspect", path, "--shape", "x=2,3", "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["kind"] == "onnx" and info["outputs"][0]["shape"] == [2, 4]
    assert info["params"] and sum(info["ops"].values()) >= 2


# -- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, match", [
    (["run", "missing.nnvm"], "file not found"),
    (["compile", "missing.json"], "not found"),
    (["compile", "model.xyz"], "not found"),
    (["compile", str(DATA / "nnvm_mlp.json"), "--shape", "x=a,b"], "integers"),
    (["compile", str(DATA / "nnvm_mlp.json"), "--shape", "x"], "NAME="),
    (["compile", str(DATA / "nnvm_mlp.json"), "--dtype", "float99"], "unknown dtype"),
    (["compile", str(DATA / "nnvm_mlp.json"), "--target", "nosuch"], "unknown target"),
])
def test_errors_are_one_clean_line_exit_2(capsys, argv, match):
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and match in error_line(err)


def test_bad_input_shape_and_pickled_npy(capsys, tmp_path, relu_artifact):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.ones((3, 3), "float32"))
    code, _, err = run_cli(capsys, "run", relu_artifact, "--input", f"x={bad}")
    assert code == 2 and "wrong shape" in err
    pickled = tmp_path / "obj.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    code, _, err = run_cli(capsys, "run", relu_artifact, "--input", f"x={pickled}")
    assert code == 2 and "cannot read" in err  # .npy files are read with allow_pickle=False


def test_tampered_artifact_refused_by_cli(capsys, tmp_path, relu_artifact):
    data = bytearray(relu_artifact.read_bytes())
    data[len(data) // 3] ^= 0xFF
    relu_artifact.write_bytes(bytes(data))
    code, _, err = run_cli(capsys, "run", relu_artifact, "--random")
    assert code == 2 and error_line(err).startswith("nnvm: error: artifact")


def test_debug_shows_the_exception(capsys):
    with pytest.raises(SerializationError):
        cli.main(["--debug", "run", "missing.nnvm"])


# -- plugin subcommands -------------------------------------------------------------------------

class _HelloPlugin:
    @nnvm.hookimpl
    def nnvm_add_cli_commands(self, subparsers):
        p = subparsers.add_parser("hello", help="say hello (test plugin)")
        p.add_argument("--who", default="world")
        p.set_defaults(func=lambda args: print(f"hello {args.who}") or 0)


def test_plugins_add_subcommands(capsys):
    plugin_manager.register_plugin(_HelloPlugin(), "test-cli-hello")
    try:
        code, out, _ = run_cli(capsys, "hello", "--who", "nnvm")
        assert code == 0 and out == "hello nnvm\n"
        code, out, _ = run_cli(capsys, "plugins")
        assert "test-cli-hello" in out
    finally:
        plugin_manager.get_plugin_manager().unregister(name="test-cli-hello")
        plugin_manager._infos.pop("test-cli-hello", None)
    with pytest.raises(SystemExit):
        cli.main(["hello"])
    capsys.readouterr()


# -- as a process -------------------------------------------------------------------------------

def test_console_script_and_module_entry(tmp_path, relu_artifact):
    commands = [[sys.executable, "-m", "nnvm"], [sys.executable, "-m", "nnvm.cli"]]
    if shutil.which("nnvm"):
        commands.append([shutil.which("nnvm")])
    for cmd in commands:
        proc = subprocess.run(cmd + ["run", str(relu_artifact), "--random", "--output-dir",
                                     str(tmp_path / "o")], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "(2, 5)" in proc.stdout and "running" in proc.stderr
        proc = subprocess.run(cmd + ["inspect", str(tmp_path / "nope.nnvm")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        assert "not found" in error_line(proc.stderr)
