"""Entry point of the tinyflow package (group ``nnvm``, name ``tinyflow``).

TinyFlow is an NNVM *user* that also extends it: its random-normal and sparse cross-entropy
ops reach the registry as records returned from the same hook as every third-party op, so
``nnvm plugins`` lists them and any NNVM target (with its reference fallback) runs them.
"""

from __future__ import annotations

from nnvm import hookimpl


@hookimpl
def nnvm_ops() -> list:
    from . import ops

    return ops.records()


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "tinyflow: TensorFlow-style training API; ops tf_random_normal, "
                       "tf_sparse_softmax_cross_entropy"}
