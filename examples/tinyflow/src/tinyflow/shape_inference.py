"""``infer_variable_shapes``: weight shapes from data shapes, by NNVM's InferShape.

TinyFlow's trick: declare layers without weight shapes, give the data shape, and let shape
inference's backward sweep fill the weights (a dense layer's rule knows ``weight`` is
``(units, in_dim)`` once ``data`` is known; conv2d's derives OIHW from channels and kernel).
"""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from nnvm.ir import Graph, NodeEntry
from nnvm.symbol import Symbol

from ._base import TinyFlowError, is_placeholder
from .session import _var_name


def infer_variable_shapes(net: Symbol, feed_dict: Mapping[Symbol | str, Sequence[int]]
                          ) -> Iterator[tuple[Symbol, str, tuple[int, ...]]]:
    """Yield ``(variable, name, shape)`` for every variable of ``net`` (placeholders excluded).

    Args:
        net: usually the loss.
        feed_dict: ``{placeholder: shape}`` for the data inputs.

    Raises:
        TinyFlowError: some variable's shape stays unknown (names it and what to give).
    """
    shapes = {_var_name(k, "feed_dict key"): tuple(int(d) for d in v)
              for k, v in feed_dict.items()}
    g = Graph(net.outputs).apply("InferShape", shape_inputs=shapes)
    idx = g.index
    entry_shapes = g.attrs["shape"]
    for nid in idx.input_nodes:
        node = idx.nodes[nid]
        if is_placeholder(node):
            continue
        shape = entry_shapes[idx.entry_rptr[nid]]
        if shape is None:
            raise TinyFlowError(f"infer_variable_shapes: the shape of variable '{node.name}' "
                                f"cannot be inferred from {shapes}. Give the shapes of the "
                                f"placeholders it depends on")
        yield Symbol([NodeEntry(node, 0, 0)]), node.name, tuple(shape)
