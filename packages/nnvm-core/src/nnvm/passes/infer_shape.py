"""InferShape: every entry's shape from the graph inputs' shapes and each op's FInferShape."""

from __future__ import annotations

from ..errors import ShapeError
from ..ir import Graph
from ..pass_manager import register_pass
from ..params import Param, parse_value
from .infer_engine import infer_attr

_SHAPE = Param("shape", "ints")


def _normalize(value, where: str) -> tuple[int, ...]:
    shape = parse_value(_SHAPE, value, where)
    if any(d < 0 for d in shape):
        raise ShapeError(f"{where}: shape {shape} has a negative dimension; give concrete sizes")
    return shape


@register_pass("InferShape", provides=("shape", "shape_num_unknown_nodes"), opt_level=0)
def infer_shape(graph: Graph) -> Graph:
    """Infer the shape of every entry (forward and backward sweeps).

    Seeds: graph attribute ``shape_inputs`` ({input name: shape}), then each variable's
    ``shape`` attribute. Provides ``shape`` (per entry, None if unknown) and
    ``shape_num_unknown_nodes``.
    """
    return infer_attr(graph, name="shape", inputs_key="shape_inputs", var_key="shape",
                      legacy_var_key="__shape__", rule_key="FInferShape", default_rule=None,
                      normalize=_normalize, error_cls=ShapeError)
