"""InferShape: every entry's shape from the graph inputs' shapes and each op's FInferShape."""

from __future__ import annotations

import math

from ..errors import ShapeError, format_error
from ..ir import Graph
from ..pass_manager import PassSet
from ..params import Param, parse_value
from .infer_engine import infer_attr

PASSES = PassSet()

_SHAPE = Param("shape", "ints")


def _normalize(value, where: str) -> tuple[int, ...]:
    shape = parse_value(_SHAPE, value, where)
    if any(d < 0 for d in shape):
        raise ShapeError(f"{where}: shape {shape} has a negative dimension; give concrete sizes")
    return shape


def _bounded(shape: tuple[int, ...], where: str) -> None:
    """Refuse a rule's output shape no buffer could hold (a Resize scale of -1e30, a 2**40
    ConstantOfShape...) here, naming the node, rather than as an OverflowError or
    MemoryError wherever the size is first computed (memory planning, allocation)."""
    from ..runtime.artifact import MAX_ENTRY_ELEMENTS

    if any(not 0 <= d <= MAX_ENTRY_ELEMENTS for d in shape) or \
            math.prod(shape) > MAX_ENTRY_ELEMENTS:
        raise ShapeError(format_error(where, "has an impossible shape (a negative size, or "
                                             "more elements than any buffer)",
                                      f"sizes in 0..{MAX_ENTRY_ELEMENTS}, at most that many elements",
                                      shape,
                                      fix="Check the input shapes and the op's attributes "
                                          "or size inputs (scales, repeats, shape values)"))


@PASSES.define("InferShape", provides=("shape", "shape_num_unknown_nodes"), analysis=True,
               opt_level=0)
def infer_shape(graph: Graph) -> Graph:
    """Infer the shape of every entry (forward and backward sweeps).

    Seeds: graph attribute ``shape_inputs`` ({input name: shape}), then each variable's
    ``shape`` attribute. Provides ``shape`` (per entry, None if unknown) and
    ``shape_num_unknown_nodes``.
    """
    return infer_attr(graph, name="shape", inputs_key="shape_inputs", var_key="shape",
                      legacy_var_key="__shape__", rule_key="FInferShape", default_rule=None,
                      normalize=_normalize, error_cls=ShapeError, check=_bounded)
