"""Errors: one hierarchy rooted at NNVMError, shared by core and every plugin.

Every user-facing message follows one formula: where -> what -> expected vs got -> how to fix.
The ``format_error`` helper assembles that formula so that messages read alike across the code.
"""

from __future__ import annotations


class NNVMError(Exception):
    """Base class of every error NNVM raises on purpose."""


class OpNotFoundError(NNVMError, KeyError):
    """An operator name is not in the registry."""

    def __str__(self) -> str:  # KeyError would add quotes around the message
        return str(self.args[0]) if self.args else ""


class AttrError(NNVMError, ValueError):
    """An operator or graph attribute is missing, unknown or malformed."""


class ShapeError(NNVMError, ValueError):
    """Shape inference found a contradiction or could not finish."""


class TypeInferenceError(NNVMError, TypeError):
    """Dtype inference found a contradiction or could not finish."""


class GraphError(NNVMError, ValueError):
    """A graph is structurally invalid (dangling input, cycle, bad arity, bad JSON)."""


class PassError(NNVMError):
    """A pass is unknown, failed, or its declared dependencies are not met."""


class PassDependencyError(PassError):
    """A pass requires a graph attribute that no earlier pass provided."""


class PluginError(NNVMError):
    """A plugin failed to load or registered something inconsistent."""


class BackendUnavailableError(NNVMError):
    """A target was requested whose backend is not installed or has no device."""


class UnsupportedOpError(NNVMError):
    """A backend or frontend has no implementation for an operator."""


class SerializationError(NNVMError, ValueError):
    """Graph JSON, param bytes or an artifact could not be read or failed verification."""


class ExecutionError(NNVMError, RuntimeError):
    """A kernel failed while a graph was running."""


def format_error(where: str, what: str, expected: object = None, got: object = None,
                 fix: str | None = None) -> str:
    """Build a message in the house formula ``where: what; expected X, got Y. fix``.

    Args:
        where: the location, e.g. ``"node 'fc1' (op dense)"``.
        what: what is wrong, as a short clause.
        expected: what was expected (omitted when None).
        got: what was found instead (omitted when None).
        fix: how to fix it or the valid choices (omitted when None).
    """
    msg = f"{where}: {what}"
    if expected is not None or got is not None:
        msg += f"; expected {expected}, got {got}"
    if fix:
        msg += f". {fix}"
    return msg


def node_where(node) -> str:
    """Describe a node for error messages as ``node 'name' (op X)``."""
    op = "variable" if node.op is None else node.op.name
    return f"node '{node.name}' (op {op})"
