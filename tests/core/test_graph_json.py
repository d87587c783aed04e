"""Graph JSON: vectors written as the original NNVM writes them, round trips, bad input."""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

import nnvm
from nnvm import sym
from nnvm.compiler.graph_util import check_graph_equal, infer_shape
from nnvm.interpreter import Interpreter
from nnvm.errors import NNVMError, OpNotFoundError, SerializationError
from nnvm.serialization.graph_json import TYPE_FLAGS, load_json, save_json

DATA = pathlib.Path(__file__).parent / "data"


def _load(name: str) -> nnvm.Graph:
    return load_json((DATA / name).read_text())


def _by_name(graph: nnvm.Graph) -> dict:
    return {n.name: n for n in graph.index.nodes}


def _requires_ops(*names: str) -> None:
    for name in names:
        try:
            nnvm.op.get_op(name)
        except OpNotFoundError:
            pytest.skip(f"op {name} is not registered yet")


# -- vectors in the original NNVM's JSON ------------------------------------------------------

def test_legacy_keys_two_element_entries_and_flags(rng):
    g = _load("nnvm_legacy_elemwise.json")
    nodes = _by_name(g)
    assert nodes["x"].attrs == {"shape": (2, 3), "dtype": "float32"}  # __shape__/__dtype__ "0"
    assert nodes["mul0"].attrs["scalar"] == 2.0  # from "param": {"scalar": "2"}
    assert nodes["sig0"].attrs["__layout__"] == "NC"  # from legacy "attr"
    assert [n.name for n in g.index.nodes] == ["x", "y", "add0", "mul0", "relu0", "sig0", "out"]
    # per-entry attrs were written in the file's node order and follow the re-indexing
    assert g.attrs["shape"] == [(2, 3)] * 7 and g.attrs["dtype"] == ["float32"] * 7
    assert "some_future_attr" not in g.attrs  # unknown attr types are skipped, as NNVM does
    x = rng.standard_normal((2, 3)).astype("float32")
    y = rng.standard_normal((2, 3)).astype("float32")
    lib = nnvm.compiler.build(g, target="reference", opt_level=0, shape={"y": (2, 3)})
    out, add = lib.run(x=x, y=y)
    s = x + y
    np.testing.assert_allclose(add, s, rtol=1e-6)
    np.testing.assert_allclose(out, np.maximum(s * 2, 0) / (1 + np.exp(-s)), rtol=1e-5)


def test_control_deps_and_three_element_entries(rng):
    g = _load("nnvm_control_deps.json")
    nodes = _by_name(g)
    assert [c.name for c in nodes["t"].control_deps] == ["l"]
    assert [c.name for c in nodes["d"].control_deps] == ["e", "t"]
    g2 = load_json(save_json(g))
    assert [c.name for c in _by_name(g2)["d"].control_deps] == ["e", "t"]
    check_graph_equal(g, g2)
    x = rng.random((4,)).astype("float32") + 0.5
    (out,) = nnvm.compiler.build(g, target="reference", opt_level=0, shape={"x": (4,)}).run(x=x)
    np.testing.assert_allclose(out, np.log(np.exp(x)) - np.tanh(x), rtol=1e-5)


def test_nnvm_type_flags_follow_nnvm_not_mshadow():
    """NNVM's TypeFlag: 7 = int16 and 11 = bool (MXNet's mshadow has 7 = bool)."""
    assert TYPE_FLAGS[7] == "int16" and TYPE_FLAGS[11] == "bool" and TYPE_FLAGS[10] == "uint64"
    g = _load("nnvm_dtype_flags.json")
    names = ["int16", "uint8", "float16", "uint64", "bool"]
    assert g.attrs["dtype"] == [t for t in names for _ in (0, 1)]
    lib = nnvm.compiler.build(g, target="reference", opt_level=0)
    feed = {f"a_{t}": np.array([1, 0, 1]).astype(t) for t in names}
    outs = lib.run(**feed)
    assert [o.dtype.name for o in outs] == names
    saved = json.loads(save_json(g))
    assert saved["attrs"]["dtype"] == ["list_int", [7, 7, 3, 3, 2, 2, 10, 10, 11, 11]]
    assert saved["attrs"]["dltype"][1][::2] == names


def test_mlp_written_by_nnvm(rng):
    _requires_ops("dense", "softmax")
    g = _load("nnvm_mlp.json")
    fc2 = _by_name(g)["fc2"]
    assert fc2.attrs["units"] == 4 and fc2.attrs["use_bias"] is True
    assert g.attrs["shape_inputs"] == {"x": (1, 8)}  # NNVM's () = unknown is dropped
    assert g.attrs["dtype_inputs"] == {"x": "float32"}  # -1 = unknown is dropped
    ins, outs = infer_shape(g)  # seeded by the file's own shape_inputs
    assert ins == [(1, 8), (16, 8), (16,), (4, 16), (4,)] and outs == [(1, 4)]
    params = {"fc1_weight": rng.standard_normal((16, 8)), "fc1_bias": rng.standard_normal(16),
              "fc2_weight": rng.standard_normal((4, 16)), "fc2_bias": rng.standard_normal(4)}
    params = {k: v.astype("float32") for k, v in params.items()}
    x = rng.standard_normal((1, 8)).astype("float32")
    lib = nnvm.compiler.build(g, target="reference", opt_level=0, shape={"x": (1, 8)},
                              params=params)
    (out,) = lib.run(x=x)
    h = np.maximum(x @ params["fc1_weight"].T + params["fc1_bias"], 0)
    z = h @ params["fc2_weight"].T + params["fc2_bias"]
    want = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_convnet_written_by_nnvm(rng):
    _requires_ops("conv2d", "max_pool2d", "global_avg_pool2d")
    g = _load("nnvm_convnet.json")
    nodes = _by_name(g)
    conv1, conv2, pool = nodes["conv1"], nodes["conv2"], nodes["pool1"]
    assert conv1.attrs["kernel_size"] == (3, 3) and conv1.attrs["padding"] == (1, 1)
    assert conv1.attrs["channels"] == 8 and conv1.attrs["layout"] == "NCHW"
    assert conv2.attrs["use_bias"] is False and len(conv2.inputs) == 2
    assert pool.attrs["pool_size"] == (2, 2)
    _, outs = infer_shape(g)
    assert outs == [(1, 4, 1, 1)]
    assert g.attrs["shape"][-1] == (1, 4, 1, 1)
    lib = nnvm.compiler.build(g, target="reference", opt_level=0, params={
        "conv1_weight": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
        "conv1_bias": rng.standard_normal(8).astype("float32"),
        "conv2_weight": rng.standard_normal((4, 8, 3, 3)).astype("float32")})
    (out,) = lib.run(data=rng.standard_normal((1, 3, 8, 8)).astype("float32"))
    assert out.shape == (1, 4, 1, 1) and np.all(out >= 0)  # mean of relu outputs


def test_attribute_strings_are_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    code = f"__import__('os').system('touch {marker}')"
    text = json.dumps({"nodes": [{"op": "null", "name": "x", "attrs": {"note": code}},
                                 {"op": "__add_scalar__", "name": "a", "attrs": {"scalar": code},
                                  "inputs": [[0, 0]]}], "heads": [[1, 0]]})
    with pytest.raises(SerializationError, match="scalar"):
        load_json(text)
    text = json.dumps({"nodes": [{"op": "null", "name": "x", "attrs": {"note": code}},
                                 {"op": "copy", "name": "c", "attrs": {"__hint__": code},
                                  "inputs": [[0, 0]]}], "heads": [[1, 0]]})
    g = load_json(text)
    assert _by_name(g)["x"].attrs["note"] == code and _by_name(g)["c"].attrs["__hint__"] == code
    assert not marker.exists()


# -- round trips ------------------------------------------------------------------------------

def _roundtrip(graph: nnvm.Graph) -> nnvm.Graph:
    text = save_json(graph)
    g2 = load_json(text)
    check_graph_equal(graph, g2, compare_variable_attrs=True)
    assert save_json(g2) == text  # a fixed point after one trip
    return g2


def test_roundtrip_symbol_mlp_with_shape_and_dtype_attrs(rng):
    _requires_ops("dense", "softmax")
    x = sym.Variable("x", shape=(2, 8), dtype="float32")
    h = sym.relu(sym.dense(x, units=16, name="fc1"))
    net = sym.softmax(sym.dense(h, units=4, use_bias=False, name="fc2"))
    g = nnvm.graph.create(net).apply(["InferShape", "InferType"])
    g2 = _roundtrip(g)
    assert g2.attrs["shape"] == g.attrs["shape"] and g2.attrs["dtype"] == g.attrs["dtype"]
    assert g2.attrs["shape_num_unknown_nodes"] == 0
    params = {"fc1_weight": rng.standard_normal((16, 8)).astype("float32"),
              "fc1_bias": rng.standard_normal(16).astype("float32"),
              "fc2_weight": rng.standard_normal((4, 16)).astype("float32")}
    xv = rng.standard_normal((2, 8)).astype("float32")
    a = nnvm.compiler.build(g, target="reference", opt_level=0, params=params).run(x=xv)[0]
    b = nnvm.compiler.build(g2, target="reference", opt_level=0, params=params).run(x=xv)[0]
    np.testing.assert_array_equal(a, b)


def test_roundtrip_symbol_cnn(rng):
    _requires_ops("conv2d", "max_pool2d", "global_avg_pool2d")
    data = sym.Variable("data", shape=(1, 3, 8, 8))
    c1 = sym.relu(sym.conv2d(data, channels=4, kernel_size=(3, 3), padding=(1, 1),
                             name="conv1"))
    p1 = sym.max_pool2d(c1, pool_size=(2, 2), strides=(2, 2), name="pool1")
    c2 = sym.conv2d(p1, channels=2, kernel_size=(1, 1), use_bias=False, name="conv2")
    net = sym.global_avg_pool2d(c2, name="gap")
    g = nnvm.graph.create(net).apply(["InferShape", "InferType"])
    g2 = _roundtrip(g)
    conv1 = _by_name(g2)["conv1"]
    assert conv1.attrs["kernel_size"] == (3, 3) and conv1.attrs["padding"] == (1, 1)
    assert g2.attrs["shape"][g2.index.output_entries[0]] == (1, 2, 1, 1)
    text = json.loads(save_json(g))
    conv = next(n for n in text["nodes"] if n["name"] == "conv1")
    assert conv["attrs"]["kernel_size"] == "(3, 3)"  # NNVM's string spelling
    var = next(n for n in text["nodes"] if n["name"] == "data")
    assert var["attrs"] == {"__shape__": "(1, 3, 8, 8)"}  # NNVM's variable key


def test_roundtrip_multi_output_heads_and_versions():
    x = sym.Variable("x")
    a = sym.exp(x)
    g = nnvm.graph.create(sym.Group([a, sym.relu(a), x]))
    g2 = _roundtrip(g)
    assert g2.symbol.list_output_names() == g.symbol.list_output_names()
    obj = json.loads(save_json(g))
    obj["heads"][0] = [obj["heads"][0][0], 0, 2]  # versions survive
    assert load_json(json.dumps(obj)).index.outputs[0][2] == 2


def test_roundtrip_10000_node_chain_without_recursion():
    x = sym.Variable("x")
    y = x
    for _ in range(10_000):
        y = sym.relu(y)
    g = nnvm.graph.create(y)
    g2 = _roundtrip(g)
    assert g2.index.num_nodes == 10_001
    (out,) = Interpreter(g2).run({"x": np.array([-1.0, 0.0, 2.0], "float32")})
    np.testing.assert_array_equal(out, [0, 0, 2])


def test_graph_json_method_and_load_json_alias():
    g = nnvm.graph.create(sym.tanh(sym.Variable("x")))
    check_graph_equal(g, nnvm.graph.load_json(g.json()))
    check_graph_equal(g, load_json(g.json().encode()))


# -- malformed input --------------------------------------------------------------------------

GOOD = {"nodes": [{"op": "null", "name": "x", "inputs": []},
                  {"op": "relu", "name": "r", "inputs": [[0, 0, 0]]}],
        "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]],
        "attrs": {"shape": ["list_shape", [[2], [2]]]}}


def _bad(**patch):
    obj = json.loads(json.dumps(GOOD))
    for path, value in patch.items():
        target = obj
        keys = path.split("__")
        for k in keys[:-1]:
            target = target[int(k) if k.isdigit() else k]
        last = keys[-1]
        target[int(last) if last.isdigit() else last] = value
    return json.dumps(obj)


@pytest.mark.parametrize("text, match", [
    ("", "not valid JSON"),
    ("[1, 2]", "'nodes' list"),
    ("{\"nodes\": 3}", "'nodes' list"),
    ("1" * 5000, "not valid JSON"),  # int too long for Python's int parser
    ("[" * 100_000, "not valid JSON"),  # recursion in the JSON parser
    (b"\xff\xfe", "not UTF-8"),
    (_bad(heads=[]), "heads"),
    (_bad(heads=[[5, 0]]), "node 5"),
    (_bad(heads=[[1, 3]]), "output 3"),
    (_bad(heads=[[1, -1]]), "negative"),
    (_bad(heads=[[1, True]]), "entry"),
    (_bad(nodes__1__inputs=[[1, 0]]), "not defined before"),
    (_bad(nodes__1__inputs=[[0, 0], [0, 0]]), "expects 1"),
    (_bad(nodes__1__inputs=[[0, 0, 0, 0]]), "entry"),
    (_bad(nodes__1__inputs="x"), "'inputs' must be a list"),
    (_bad(nodes__1__op=7), "'op' and 'name'"),
    (_bad(nodes__1__control_deps=[1]), "control_deps"),
    (_bad(nodes__1__attrs=[1]), "'attrs' must be an object"),
    (_bad(nodes__1__subgraphs=3), "subgraphs"),
    (_bad(nodes__0__inputs=[[0, 0]]), "not defined before"),
    (_bad(nodes__0__attrs={"__shape__": "(a, b"}), "shape"),
    (_bad(nodes__0__attrs={"__shape__": "(-1, 2)"}), "negative"),
    (_bad(nodes__0__attrs={"__dtype__": "99"}), "type flag 99"),
    (_bad(nodes__0__attrs={"__dtype__": "complex7"}), "dtype"),
    (_bad(nodes__0__attrs={"k": 3}), "must be a string"),
    (_bad(nodes__0="null"), "must be an object"),
    (_bad(arg_nodes=[1]), "not a variable"),
    (_bad(arg_nodes=[9]), "arg_nodes"),
    (_bad(node_row_ptr=[0, 1, 3]), "node_row_ptr"),
    (_bad(attrs=[1]), "'attrs' must be an object"),
    (_bad(attrs={"shape": ["list_shape", [[2]]]}), "has 1 values"),
    (_bad(attrs={"shape": ["list_shape", [[2], [-2]]]}), "negative"),
    (_bad(attrs={"shape": ["list_shape", [[2], "x"]]}), "list of integers"),
    (_bad(attrs={"shape": "list_shape"}), "type_name, value"),
    (_bad(attrs={"dltype": ["list_str", ["float32", "float99"]]}), "dtype names"),
    (_bad(attrs={"dtype": ["list_int", [0, 42]]}), "type flag"),
    (_bad(attrs={"storage_id": ["list_int", [0, 1, 2]]}), "has 3 values"),
    (_bad(attrs={"n": ["int", "3"]}), "integer"),
    (_bad(attrs={"d": ["dict_str_int", {"a": "b"}]}), "dict_str_int"),
    (_bad(attrs={"shape_inputs": ["list_shape", [[1], [2]]]}), "inputs"),
])
def test_malformed_json_raises_serialization_error(text, match):
    with pytest.raises(SerializationError, match=match):
        load_json(text)


def test_unknown_op_names_the_op():
    text = _bad(nodes__1__op="no_such_op_xyz")
    with pytest.raises(OpNotFoundError, match="no_such_op_xyz"):
        load_json(text)


def test_bad_op_attribute_names_node():
    text = json.dumps({"nodes": [{"op": "null", "name": "x"},
                                 {"op": "__mul_scalar__", "name": "m7",
                                  "attrs": {"scalar": "(1, 2)"}, "inputs": [[0, 0]]}],
                       "heads": [[1, 0]]})
    with pytest.raises(SerializationError, match="m7"):
        load_json(text)


def test_deeply_nested_subgraphs_refused():
    inner: dict = {"nodes": [{"op": "null", "name": "x"}], "heads": [[0, 0]]}
    for _ in range(80):
        inner = {"nodes": [{"op": "null", "name": "x"},
                           {"op": "copy", "name": "c", "inputs": [[0, 0]],
                            "subgraphs": [inner]}], "heads": [[1, 0]]}
    with pytest.raises(NNVMError):
        load_json(json.dumps(inner))


def test_errors_are_nnvm_errors_not_builtin_lookups():
    assert issubclass(SerializationError, NNVMError)
    for text in ("{}", "null", "{\"nodes\": [{}], \"heads\": [[0, 0]]}",
                 "{\"nodes\": [{\"op\": \"null\", \"name\": \"x\"}], \"heads\": [[0]]}"):
        with pytest.raises(SerializationError):
            load_json(text)


def test_data_dir_vectors_are_all_tested():
    tested = {"nnvm_legacy_elemwise.json", "nnvm_control_deps.json", "nnvm_dtype_flags.json",
              "nnvm_mlp.json", "nnvm_convnet.json"}
    assert {p for p in os.listdir(DATA) if p.endswith(".json")} == tested
