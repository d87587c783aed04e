"""InferType: every entry's dtype; ops without FInferType keep all dtypes alike (SameType)."""

from __future__ import annotations

from ..errors import TypeInferenceError
from ..ir import Graph
from ..pass_manager import PassSet
from ..params import Param, parse_value
from ..serialization.graph_json import TYPE_FLAGS
from .infer_engine import infer_attr

PASSES = PassSet()

_DTYPE = Param("dtype", "dtype")


def _normalize(value, where: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value in TYPE_FLAGS:
        return TYPE_FLAGS[value]
    return parse_value(_DTYPE, value, where)


def same_type(attrs, ins, outs):
    """Default rule: every input and output has the dtype of the first known one."""
    known = next((t for t in (*ins, *outs) if t is not None), None)
    if known is None:
        return ins, outs
    for t in (*ins, *outs):
        if t is not None and t != known:
            raise TypeInferenceError(f"inputs and outputs must share one dtype; got {known} "
                                     f"and {t}. Insert a cast")
    return [known] * len(ins), [known] * len(outs)


@PASSES.define("InferType", provides=("dtype", "dtype_num_unknown_nodes"), analysis=True,
               opt_level=0)
def infer_type(graph: Graph) -> Graph:
    """Infer the dtype (a name such as ``float32``) of every entry.

    Seeds: graph attribute ``dtype_inputs`` ({input name: dtype}), then each variable's
    ``dtype`` attribute. Provides ``dtype`` and ``dtype_num_unknown_nodes``.
    """
    return infer_attr(graph, name="dtype", inputs_key="dtype_inputs", var_key="dtype",
                      legacy_var_key="__dtype__", rule_key="FInferType", default_rule=same_type,
                      normalize=_normalize, error_cls=TypeInferenceError)
