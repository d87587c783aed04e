"""The ``reference`` target: runs the optimised graph with the NumPy interpreter.

Always available, and the oracle for every other backend. Its artifact holds the graph JSON
and params only (no native code).
"""

from __future__ import annotations

import numpy as np

from ..interpreter import Interpreter
from ..runtime.module import Module


class ReferenceModule(Module):
    """Runtime module of the ``reference`` target.

    ``_execute`` keeps every value in a per-call list (the interpreter holds no run state),
    so concurrent ``run`` calls execute in parallel without the module's lock."""

    _reentrant = True

    def __init__(self, graph, params, target: str = "reference"):
        super().__init__(graph, params, target)
        self._interp = Interpreter(graph)

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._interp.run(feed)

    def _num_kernels(self) -> int:
        return len(self._interp._steps)


class ReferenceBackend:
    """Backend record for the reference target."""

    name = "reference"
    description = "NumPy reference interpreter (always available; the oracle)"
    priority = 0
    options: dict[str, str] = {}

    def is_available(self) -> str | None:
        return None

    def build(self, graph, params, target, config) -> ReferenceModule:
        return ReferenceModule(graph, params, str(target))

    def load(self, artifact) -> ReferenceModule:
        return ReferenceModule(artifact.graph(), artifact.params, artifact.manifest["target"])
