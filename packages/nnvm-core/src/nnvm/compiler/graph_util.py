"""Graph helpers of the original NNVM: infer_shape, infer_dtype, gradients, graph equality."""

from __future__ import annotations

from typing import Sequence

from ..errors import PassError
from ..ir import Graph
from ..symbol import Symbol


def _graph(g: Graph | Symbol) -> Graph:
    return Graph(g.outputs) if isinstance(g, Symbol) else g


def infer_shape(graph: Graph | Symbol, **shape) -> tuple[list, list]:
    """``(input_shapes, output_shapes)`` in ``index.input_names`` / output order."""
    g = _graph(graph).apply("InferShape", shape_inputs=shape)
    idx = g.index
    s = g.attrs["shape"]
    return ([s[idx.entry_rptr[i]] for i in idx.input_nodes],
            [s[e] for e in idx.output_entries])


def infer_dtype(graph: Graph | Symbol, **dtype) -> tuple[list, list]:
    """``(input_dtypes, output_dtypes)`` as dtype names."""
    g = _graph(graph).apply("InferType", dtype_inputs=dtype)
    idx = g.index
    t = g.attrs["dtype"]
    return ([t[idx.entry_rptr[i]] for i in idx.input_nodes],
            [t[e] for e in idx.output_entries])


def get_gradient_graph(ys: Symbol | Sequence[Symbol], xs: Symbol | Sequence[Symbol],
                       grad_ys: Symbol | Sequence[Symbol] | None = None) -> Graph:
    """The graph whose outputs are d(sum ys)/d(xs); needs the Gradient pass (nnvm-passes)."""
    from ..pass_manager import get_pass

    ys_l = [ys] if isinstance(ys, Symbol) else list(ys)
    xs_l = [xs] if isinstance(xs, Symbol) else list(xs)
    try:
        get_pass("Gradient")
    except PassError:
        raise PassError("gradients: the Gradient pass is not installed; "
                        "pip install nnvm-passes") from None
    y_entries = [e for y in ys_l for e in y.outputs]
    x_entries = [e for x in xs_l for e in x.outputs]
    g = Graph(y_entries, {"grad_ys": y_entries, "grad_xs": x_entries})
    if grad_ys is not None:
        gy = [grad_ys] if isinstance(grad_ys, Symbol) else list(grad_ys)
        g.attrs["grad_ys_out_grad"] = [e for s in gy for e in s.outputs]
    return g.apply("Gradient")


def gradients(ys, xs, grad_ys=None) -> list[Symbol]:
    """Symbolic gradients of ``ys`` with respect to ``xs``, one Symbol per x."""
    g = get_gradient_graph(ys, xs, grad_ys)
    return [Symbol([e]) for e in g.outputs]


def check_graph_equal(a: Graph | Symbol, b: Graph | Symbol,
                      compare_variable_attrs: bool = False) -> None:
    """Raise AssertionError describing the first structural difference of two graphs."""
    ia, ib = _graph(a).index, _graph(b).index
    if ia.num_nodes != ib.num_nodes:
        raise AssertionError(f"graphs differ: {ia.num_nodes} vs {ib.num_nodes} nodes")
    for nid, (na, nb) in enumerate(zip(ia.nodes, ib.nodes)):
        opa = na.op.name if na.op else "null"
        opb = nb.op.name if nb.op else "null"
        if opa != opb:
            raise AssertionError(f"node #{nid}: op {opa} ('{na.name}') vs {opb} ('{nb.name}')")
        if ia.inputs[nid] != ib.inputs[nid]:
            raise AssertionError(f"node #{nid} ({opa}): inputs {ia.inputs[nid]} vs "
                                 f"{ib.inputs[nid]}")
        if (na.op is not None or compare_variable_attrs) and na.attrs != nb.attrs:
            raise AssertionError(f"node #{nid} ({opa}): attrs {na.attrs} vs {nb.attrs}")
    if ia.outputs != ib.outputs:
        raise AssertionError(f"graph outputs differ: {ia.outputs} vs {ib.outputs}")
