"""System ops that passes insert: variable assignment and cross-device copies.

``_assign`` is NNVM's mutation op (TinyFlow's ``assign``): it declares that it writes its
``lhs`` variable (``FMutateInputs``), so the OrderMutation pass can order reads and writes of
that variable, and PlanMemory may compute the new value in the storage of ``rhs``. Its value
is the new content of the variable. The reference interpreter has no mutable state, so there
the op simply *returns* the new value; a training loop (or a runtime that binds variables to
buffers) writes that output back into the variable for the next step.

``device_copy`` is inserted by PlaceDevice wherever a value crosses devices. Numerically it is
the identity; its gradient is the output gradient, unchanged (PlaceDevice, run again on the
gradient graph, inserts the copy back).
"""

from __future__ import annotations

import numpy as np

from ..op import OpPattern, OpSet
from ..params import Param
from .common import same_dtype, same_shape

defs = OpSet("system")


def _assign_ref(attrs, lhs, rhs):
    return np.array(rhs, dtype=lhs.dtype, copy=True)


defs.op(
    "_assign", doc="Assign `rhs` to the variable `lhs` and return the new value. The op "
    "mutates `lhs` (FMutateInputs), so OrderMutation orders it after earlier reads of `lhs` "
    "and before later ones; runtimes without variable state return the new value, which the "
    "caller stores back into the variable.",
    inputs=("lhs", "rhs"), shape=same_shape, dtype=same_dtype, reference=_assign_ref,
    gradient=lambda n, og: [None, og[0]], pattern=OpPattern.OPAQUE,
    inplace=lambda attrs: [(1, 0)], aliases=("assign",), support_level=4,
    FMutateInputs=lambda attrs: [0], FIgnoreInputs=lambda attrs: [0])


defs.op(
    "device_copy", doc="Copy a tensor to another device (inserted by the PlaceDevice pass at "
    "device boundaries). Numerically the identity.",
    inputs=("data",), params=[Param("dst_device", "str", default="",
                                    doc="name of the device the copy lands on")],
    shape=same_shape, dtype=same_dtype,
    reference=lambda attrs, x: np.array(x, copy=True),
    gradient=lambda n, og: [og[0]], pattern=OpPattern.OPAQUE, support_level=4)
