"""Graph-scale benchmark: a 10,000-node graph through the symbol API, shape inference and JSON.

Measures, for a chain-with-skips graph of ``--nodes`` op nodes (default 10,000):
symbol construction, indexing (topological order), InferShape + InferType, JSON save and load,
param-free build for the ``reference`` target and one run. Every traversal in nnvm is
iterative, so this runs under Python's default recursion limit (checked, not assumed: the
limit is set to 1,000 before starting). When onnx is installed, the same graph is built with
``onnx.helper``, shape-inferred and serialised in the same run, and the ratios are printed.

Usage: ``hatch run bench-graph`` or ``python benchmarks/bench_graph_10k.py [--nodes N]``.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np

import nnvm
from nnvm import sym

UNARY = ("relu", "tanh", "sigmoid")


def timed(label: str, results: dict, fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    results[label] = time.perf_counter() - t0
    return out


def build_symbol(num_nodes: int) -> sym.Symbol:
    """A chain of unary ops and scalar multiplies, with an add back 10 steps every 10 nodes."""
    y = sym.Variable("x")
    history = [y]
    made = 0
    while made < num_nodes:
        if made % 10 == 9 and len(history) > 10:
            y = y + history[-10]
        elif made % 3 == 2:
            y = y * 0.5
        else:
            y = getattr(sym, UNARY[made % len(UNARY)])(y)
        history.append(y)
        made += 1
    return y


def build_onnx(num_nodes: int):
    """The same graph as an ONNX model, built with onnx.helper."""
    from onnx import TensorProto, helper

    nodes, names = [], ["x"]
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    for made in range(num_nodes):
        out = f"n{made}"
        if made % 10 == 9 and len(names) > 10:
            nodes.append(helper.make_node("Add", [names[-1], names[-10]], [out]))
        elif made % 3 == 2:
            nodes.append(helper.make_node("Mul", [names[-1], "half"], [out]))
        else:
            nodes.append(helper.make_node(UNARY[made % 3].capitalize(), [names[-1]], [out]))
        names.append(out)
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, None)], [half])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def bench_onnx(num_nodes: int) -> dict:
    import onnx

    res: dict[str, float] = {}
    model = timed("construct", res, build_onnx, num_nodes)
    timed("infer shapes", res, onnx.shape_inference.infer_shapes, model)
    blob = timed("save", res, model.SerializeToString)
    timed("load", res, onnx.load_from_string, blob)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000, help="number of op nodes")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(1000)
    nnvm.plugins()  # load the registries first: plugin discovery is not part of the timing
    res: dict[str, float] = {}

    y = timed("construct", res, build_symbol, args.nodes)
    graph = nnvm.graph.create(y)
    idx = timed("index", res, lambda: graph.index)
    num_ops = sum(1 for n in idx.nodes if n.op is not None)
    g = graph.with_attrs(shape_inputs={"x": (4, 16)}, dtype_inputs={"x": "float32"})
    g = timed("infer shapes", res, g.apply, ["InferShape", "InferType"])
    assert g.attrs["shape_num_unknown_nodes"] == 0, "shape inference left unknown entries"
    text = timed("save", res, g.json)
    g2 = timed("load", res, nnvm.graph.load_json, text)
    assert g2.index.num_nodes == idx.num_nodes and g2.json() == text, "JSON round trip differs"
    steps: list[str] = []
    lib = timed("build (reference)", res, lambda: nnvm.compiler.build(
        y, "reference", {"x": (4, 16)}, log=steps.append))
    x = np.random.default_rng(0).standard_normal((4, 16)).astype("float32")
    (out,) = timed("run (reference)", res, lambda: lib.run(x=x))
    assert out.shape == (4, 16) and np.isfinite(out).all()

    print(f"graph: {num_ops} op nodes, {idx.num_nodes} nodes, JSON {len(text) / 1e6:.2f} MB; "
          f"recursion limit {sys.getrecursionlimit()} (never hit)")
    theirs = {}
    try:
        theirs = bench_onnx(args.nodes)
    except ImportError:
        print("onnx not installed: no comparison")
    print(f"{'stage':<20}{'nnvm ms':>10}{'onnx ms':>10}{'nnvm/onnx':>11}")
    for stage, sec in res.items():
        other = theirs.get(stage)
        cols = f"{other * 1e3:>10.1f}{sec / other:>10.2f}x" if other else f"{'-':>10}{'-':>11}"
        print(f"{stage:<20}{sec * 1e3:>10.1f}{cols}")
    passes = [ln for ln in steps if ln.endswith(" ms")]
    print("build passes (opt_level 2): " + ", ".join(passes))
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
