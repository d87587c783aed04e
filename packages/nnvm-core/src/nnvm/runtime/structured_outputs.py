"""A model's outputs in their own structure: tensors, sequences, ZipMap dicts, optionals.

Why: a compiled graph only has tensor outputs, so a frontend flattens an output that is a
sequence (one tensor per item), a ZipMap (the ``(N, C)`` scores) or an optional (its item,
or nothing) and records each output's structure in the graph attribute
``onnx_output_structure``: ``"tensor"``, ``["sequence", n]``, ``["zipmap", labels]`` or
``["optional", None | structure]``. ``regroup`` turns the flat results back into the values
onnxruntime returns. It lives in core (pure NumPy) because ``nnvm.InferenceSession`` and a
loaded ``.nnvm`` must regroup without the ONNX frontend installed.

Graph JSON keeps only flat lists, so ``persistable`` stores the structure as a JSON string
under the same attribute before a module is exported; ``structure_of`` reads either form.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Sequence

import numpy as np

#: The graph attribute holding one structure record per model output.
STRUCTURE_ATTR = "onnx_output_structure"
#: The graph attribute holding the model's own output names (one per record).
NAMES_ATTR = "onnx_output_names"


def regroup(structure, flat: Sequence) -> list:
    """Inverse of the importer's output flattening: tensors, lists and None per ONNX output."""
    flat = list(flat)
    pos = 0

    def take(st):
        nonlocal pos
        if st == "tensor":
            pos += 1
            return flat[pos - 1]
        if st[0] == "sequence":
            pos += st[1]
            return list(flat[pos - st[1]:pos])
        if st[0] == "zipmap":
            pos += 1
            return [dict(zip(st[1], map(float, row))) for row in np.asarray(flat[pos - 1])]
        return None if st[1] is None else take(st[1])

    return [take(st) for st in structure]


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> tuple:
    return tuple(json.loads(text))


def structure_of(graph: Any) -> list | None:
    """The output structure recorded on ``graph`` (list or JSON-string form), or None when
    every output is a plain tensor."""
    value = getattr(graph, "attrs", {}).get(STRUCTURE_ATTR)
    if isinstance(value, str):
        value = list(_parse(value))
    return value or None


def persistable(graph: Any) -> Any:
    """``graph`` with its output structure as a JSON string, so it survives graph JSON
    (export / load); a graph without one is returned unchanged."""
    value = getattr(graph, "attrs", {}).get(STRUCTURE_ATTR)
    if not value or isinstance(value, str):
        return graph
    return graph.with_attrs(**{STRUCTURE_ATTR: json.dumps(value, default=_plain)})


def _plain(value):
    """NumPy scalars among ZipMap labels as the Python values JSON knows."""
    return value.item()
