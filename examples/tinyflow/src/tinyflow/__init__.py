"""TinyFlow on NNVM: a TensorFlow-style training API in a few hundred lines.

``import tinyflow as tf`` gives placeholders, variables, ``assign``/``group``, ``gradients``,
math on symbols, ``tf.nn`` layers and losses, ``tf.train`` optimisers and a ``Session`` that
compiles with ``nnvm.compiler.build`` on any NNVM target. NNVM does the rest: graph
definition, shape inference (``infer_variable_shapes``), autodiff (the Gradient pass, with a
sublinear-memory option), memory planning (PlanMemory) and code generation.

Every registered NNVM op is reachable too: ``tf.<op>`` falls back to ``nnvm.symbol.<op>``.
"""

from __future__ import annotations

from ._base import (Operation, TinyFlowError, Variable, abs, argmax, assign, cast, equal, exp,
                    float32, float64, global_variables_initializer, gradients, group,
                    initialize_all_variables, int32, int64, is_placeholder, log, matmul,
                    negative, normal, ones, ones_like, placeholder, random_normal, reduce_mean,
                    reduce_sum, reset_default_graph, reshape, set_random_seed, sigmoid, sqrt,
                    square, tanh, trainable_variables, zeros, zeros_like)
from .session import Session
from .shape_inference import infer_variable_shapes

__version__ = "0.4.0"


def _ensure_ops_registered() -> None:
    """Register TinyFlow's ops by hand when its entry point is not installed (e.g. the package
    is imported from a source tree). When it is installed, NNVM's plugin loader registers
    them; registering here too would make the loader, which may be importing this very
    module, see the ops twice."""
    from importlib.metadata import entry_points

    if any(ep.name == "tinyflow" for ep in entry_points(group="nnvm")):
        return
    from nnvm import plugin_manager

    from . import plugin

    plugin_manager.register_plugin(plugin, "tinyflow")


_ensure_ops_registered()

from . import datasets, nn, train  # noqa: E402

__all__ = ["Operation", "Session", "TinyFlowError", "Variable", "abs", "argmax", "assign",
           "cast", "datasets", "equal", "exp", "float32", "float64",
           "global_variables_initializer", "gradients", "group", "infer_variable_shapes",
           "initialize_all_variables", "int32", "int64", "is_placeholder", "log", "matmul",
           "negative", "nn", "normal", "ones", "ones_like", "placeholder", "random_normal",
           "reduce_mean", "reduce_sum", "reset_default_graph", "reshape", "set_random_seed",
           "sigmoid", "sqrt", "square", "tanh", "train", "trainable_variables", "zeros",
           "zeros_like"]


def __getattr__(name: str):
    """Any other registered NNVM op, as TinyFlow exposed the whole registry."""
    from nnvm import symbol

    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(symbol, name)
    except AttributeError:
        raise AttributeError(f"module 'tinyflow' has no attribute '{name}' (and NNVM has no "
                             f"op of that name)") from None
