"""The third-party plugin in examples/nnvm-example-plugin, used only through the public API."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.compiler import graph_util

PLUGIN_SRC = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                          "nnvm-example-plugin", "src", "nnvm_example")


def swish(x, beta=1.0):
    return x / (1.0 + np.exp(-beta * x))


def test_entry_point_discovery_in_a_fresh_interpreter(example_plugin):
    code = ("import nnvm; p = {i.name: i for i in nnvm.plugins()}['example']; "
            "print(p.available, p.module, p.provides['ops'], p.provides['passes'], "
            "p.provides['targets'])")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNVM_")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("True nnvm_example.plugin ['example_swish'] ['FuseSwish'] "
                                   "['example']")


def test_plugins_lists_what_it_provides(example_plugin):
    info = {p.name: p for p in nnvm.plugins()}["example"]
    assert info.available and info.reason is None
    assert info.provides["ops"] == ["example_swish"]
    assert info.provides["passes"] == ["FuseSwish"]
    assert info.provides["targets"] == ["example"]
    assert "example_swish" in info.summary


def test_op_has_symbol_function_shape_rule_and_kernel(example_plugin, rng):
    x = sym.Variable("x")
    y = sym.example_swish(x, beta=2.0, name="act")
    assert "Swish activation" in sym.example_swish.__doc__
    _, out_shapes = graph_util.infer_shape(nnvm.graph.create(y), x=(3, 5))
    assert out_shapes == [[3, 5]] or out_shapes == [(3, 5)]
    a = rng.standard_normal((3, 5)).astype("float32")
    (out,) = nnvm.compiler.build(y, target="reference", shape={"x": (3, 5)}).run(x=a)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, swish(a, 2.0), rtol=1e-6)
    with pytest.raises(nnvm.NNVMError, match="beta"):
        sym.example_swish(x, beta="steep")


def test_fuse_swish_pass_rewrites_x_times_sigmoid_x(example_plugin, rng):
    x = sym.Variable("x")
    z = sym.Variable("z")
    y = x * sym.sigmoid(x) + sym.sigmoid(z) * z + x * sym.sigmoid(z)  # the last one must stay
    g = nnvm.graph.create(y)
    fused = g.apply(["FuseSwish"])
    ops = [n.op.name for n in fused.index.nodes if n.op is not None]
    assert ops.count("example_swish") == 2
    assert ops.count("sigmoid") == 1 and ops.count("broadcast_mul") == 1
    a, b = (rng.standard_normal((4, 3)).astype("float32") for _ in range(2))
    want = nnvm.compiler.build(g, "reference", shape={"x": a.shape, "z": b.shape}).run(x=a, z=b)
    got = nnvm.compiler.build(fused, "reference", shape={"x": a.shape, "z": b.shape}).run(
        x=a, z=b)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_fuse_swish_leaves_other_graphs_alone(example_plugin):
    x = sym.Variable("x")
    g = nnvm.graph.create(sym.relu(x) * sym.sigmoid(x))
    assert g.apply(["FuseSwish"]).json() == g.json()


def test_example_target_builds_runs_exports_and_loads(example_plugin, rng, tmp_path):
    x = sym.Variable("x")
    net = sym.dense(x, units=6, name="fc1") if _has_op("dense") else x * 3.0
    y = sym.example_swish(net) - 1.0
    w = {"fc1_weight": rng.standard_normal((6, 4)).astype("float32"),
         "fc1_bias": rng.standard_normal(6).astype("float32")} if _has_op("dense") else {}
    a = rng.standard_normal((2, 4)).astype("float32")
    lib = nnvm.compiler.build(y, target="example", shape={"x": a.shape}, params=w)
    ref = nnvm.compiler.build(y, target="reference", shape={"x": a.shape}, params=w)
    assert type(lib).__name__ == "ExampleModule" and lib.target == "example"
    (got,) = lib.run(x=a)
    np.testing.assert_allclose(got, ref.run(x=a)[0], rtol=1e-6)
    assert lib.stats()["num_kernels"] == len(lib.program)
    path = str(tmp_path / "model.nnvm")
    lib.export(path)
    assert "program.json" in zipfile.ZipFile(path).namelist()
    lib2 = nnvm.runtime.load(path)
    assert type(lib2).__name__ == "ExampleModule" and lib2.program == lib.program
    np.testing.assert_allclose(lib2.run(x=a)[0], got, rtol=0, atol=0)


def test_example_target_is_never_preferred_over_reference(example_plugin):
    assert nnvm.backend.best_target() != "example"
    with pytest.raises(nnvm.NNVMError, match="Valid options"):
        nnvm.compiler.build(sym.relu(sym.Variable("x")), "example -fast", shape={"x": (2,)})


def test_plugin_is_well_under_100_lines_of_code():
    lines = 0
    for name in os.listdir(PLUGIN_SRC):
        if name.endswith(".py"):
            with open(os.path.join(PLUGIN_SRC, name), encoding="utf-8") as f:
                lines += sum(1 for ln in f if ln.strip() and not ln.strip().startswith("#"))
    assert lines < 100


def _has_op(name: str) -> bool:
    try:
        nnvm.op.get_op(name)
        return True
    except nnvm.NNVMError:
        return False
