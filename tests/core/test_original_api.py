"""The original NNVM API, run as its README wrote it, next to the one-object form (issue 17).

    graph, lib, params = nnvm.compiler.build(graph, target, shape={"data": s}, params=params)
    module = nnvm.runtime.graph_runtime.create(graph, lib, nnvm.cpu(0))
    module.set_input(**params)
    module.run(data=x)
    module.get_output(0)

on ``reference`` and ``llvm`` (skipped where llvm cannot build), checked against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.backend import build_reason, get_backend
from nnvm.errors import BackendUnavailableError, NNVMError


def _reason(target: str) -> str | None:
    try:
        return build_reason(get_backend(target, require_available=False))
    except BackendUnavailableError as exc:
        return str(exc)


TARGETS = ["reference", pytest.param("llvm", marks=pytest.mark.llvm)]


def _net():
    data = sym.Variable("data")
    net = sym.dense(data, units=10, name="fc1")
    return sym.softmax(sym.relu(net), name="prob")


def _expected(x, w, b):
    z = np.maximum(x @ w.T + b, 0)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture
def weights(rng):
    return {"fc1_weight": rng.standard_normal((10, 8)).astype("float32"),
            "fc1_bias": rng.standard_normal(10).astype("float32")}


@pytest.mark.parametrize("target", TARGETS)
def test_original_workflow_as_written(target, weights, rng):
    if _reason(target):
        pytest.skip(_reason(target))
    s = (2, 8)
    x = rng.standard_normal(s).astype("float32")
    graph = nnvm.graph.create(_net())
    params = dict(weights)

    # -- as the original README wrote it --
    graph, lib, params = nnvm.compiler.build(graph, target, shape={"data": s}, params=params)
    module = nnvm.runtime.graph_runtime.create(graph, lib, nnvm.cpu(0))
    module.set_input(**params)
    module.run(data=x)
    out = module.get_output(0)

    np.testing.assert_allclose(out, _expected(x, weights["fc1_weight"], weights["fc1_bias"]),
                               rtol=1e-5, atol=1e-6)
    assert isinstance(graph, nnvm.Graph) and graph.json()  # the optimised graph
    assert isinstance(lib, nnvm.runtime.Module) and lib.target.split()[0] == target
    assert set(params) <= set(graph.index.input_names)
    assert all(isinstance(v, np.ndarray) for v in params.values())
    # the TVM-era output form: get_output(0, preallocated) fills and returns it
    buf = np.empty(out.shape, out.dtype)
    assert module.get_output(0, buf) is buf
    np.testing.assert_array_equal(buf, out)
    assert module.get_num_outputs() == 1


@pytest.mark.parametrize("target", TARGETS)
def test_one_object_form_keeps_working(target, weights, rng, tmp_path):
    if _reason(target):
        pytest.skip(_reason(target))
    x = rng.standard_normal((2, 8)).astype("float32")
    want = _expected(x, weights["fc1_weight"], weights["fc1_bias"])
    lib = nnvm.compiler.build(_net(), target=target, shape={"data": (2, 8)}, params=weights)
    (out,) = lib.run(data=x)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    lib.export(str(tmp_path / "m.nnvm"))
    lib2 = nnvm.runtime.load(str(tmp_path / "m.nnvm"))
    np.testing.assert_allclose(lib2.run(data=x)[0], want, rtol=1e-5, atol=1e-6)
    # a loaded module is a lib too: its graph and the graph's JSON both identify it
    for g in (lib2.graph, lib2.graph.json()):
        module = nnvm.runtime.graph_runtime.create(g, lib2, nnvm.cpu(0))
        module.run(data=x)
        np.testing.assert_allclose(module.get_output(0), want, rtol=1e-5, atol=1e-6)


def test_params_rebound_through_the_graph_runtime(weights, rng):
    x = rng.standard_normal((2, 8)).astype("float32")
    graph, lib, params = nnvm.compiler.build(nnvm.graph.create(_net()), "reference",
                                             shape={"data": (2, 8)}, params=dict(weights),
                                             opt_level=0)
    module = nnvm.runtime.graph_runtime.create(graph, lib, nnvm.cpu(0))
    new_w = rng.standard_normal((10, 8)).astype("float32")
    module["set_input"](fc1_weight=new_w)  # packed-function style lookup
    module.run(data=x)
    np.testing.assert_allclose(module.get_output(0), _expected(x, new_w, weights["fc1_bias"]),
                               rtol=1e-5, atol=1e-6)
    # the deploy pattern: params from save_param_dict bytes
    module.load_params(bytearray(nnvm.compiler.save_param_dict(params)))
    module.run(data=x)
    np.testing.assert_allclose(module.get_output(0),
                               _expected(x, weights["fc1_weight"], weights["fc1_bias"]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(module.get_input("fc1_weight"), weights["fc1_weight"])
    np.testing.assert_array_equal(module.get_input("data"), x)


def test_create_refuses_mismatches(weights):
    source = nnvm.graph.create(_net())
    graph, lib, _ = nnvm.compiler.build(source, "reference", shape={"data": (2, 8)},
                                        params=dict(weights))
    with pytest.raises(NNVMError, match="graph is not the graph lib was built from"):
        nnvm.runtime.graph_runtime.create(source, lib, nnvm.cpu(0))  # the unoptimised one
    with pytest.raises(NNVMError, match=r"does not run on cuda\(0\).*Pass nnvm.cpu\(0\)"):
        nnvm.runtime.graph_runtime.create(graph, lib, nnvm.cuda(0))
    with pytest.raises(NNVMError, match="lib must be the module nnvm.compiler.build returned"):
        nnvm.runtime.graph_runtime.create(graph, b"not a lib", nnvm.cpu(0))
    with pytest.raises(NNVMError, match="ctx must be a device context"):
        nnvm.runtime.graph_runtime.create(graph, lib, "cpu")


def test_device_contexts():
    assert nnvm.cpu(0) == nnvm.runtime.graph_runtime.Device("cpu", 0)
    assert nnvm.gpu(1) == nnvm.cuda(1) and nnvm.cl() == nnvm.opencl(0)
    assert repr(nnvm.cpu(0)) == "cpu(0)"
