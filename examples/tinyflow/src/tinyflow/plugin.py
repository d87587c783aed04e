"""Entry point of the tinyflow package (group ``nnvm``, name ``tinyflow``).

TinyFlow is an NNVM *user* that also extends it: its random-normal and sparse cross-entropy
ops reach the registry through the same hook as every third-party op, so ``nnvm plugins``
lists them and any NNVM target (with its reference fallback) runs them.
"""

from __future__ import annotations

from nnvm import hookimpl


@hookimpl
def nnvm_register_ops(registry) -> None:
    from . import ops

    ops.register(registry)


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "tinyflow: TensorFlow-style training API; ops tf_random_normal, "
                       "tf_sparse_softmax_cross_entropy"}
