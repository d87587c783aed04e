"""Control-flow bodies (``if_else`` / ``loop`` / ``scan``) compiled for a target.

Why: the branch decision of an ``If`` (or a Loop's trip count) is made on the host, which is
fine, but the body used to run in NumPy through the reference interpreter, and in real
models the body is most of the model (silero VAD's ``If`` selects the whole 16 kHz or 8 kHz
network): 10x slower than onnxruntime. A compiled target gives each control-flow node a
``SubgraphRunner`` in ``node.info["subgraph_runner"]`` (read by ``nnvm.ops.control_flow``):
the first time a body runs with a given signature of input shapes and dtypes it is built
with ``nnvm.compiler.build`` for the same target, and later runs call the compiled module.
Nested control flow nests the same way. Who installs it: the llvm executor for the control
flow it runs, and ``nnvm.runtime.host_tail`` for control flow in a data-dependent host tail
(an If whose branches give different shapes), whatever the compiled target.

Bodies are compiled when first run, not at build time, because a Loop's carried values
may change shape between iterations; the kernel cache makes the second process fast. Where
the compiler is not installed (a runtime-only deployment) or a body cannot be built, the
body runs in the interpreter as before (``runner`` returns None), never fails because of it.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import NNVMError


class SubgraphRunner:
    """Compile-on-first-use runner for the bodies of one control-flow node."""

    def __init__(self, target: str, num_threads: int):
        self.target = target
        self.num_threads = num_threads
        self._modules: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self.compiled = 0
        self.interpreted = 0

    def __call__(self, graph, feed: dict[str, np.ndarray]):
        key = (id(graph),) + tuple(sorted((k, np.shape(v), np.asarray(v).dtype.str)
                                          for k, v in feed.items()))
        with self._lock:
            if key not in self._modules:
                self._modules[key] = self._build(graph, feed)
            module = self._modules[key]
        if module is None:
            self.interpreted += 1
            return None
        self.compiled += 1
        return module.run(**{k: np.asarray(feed[k]) for k in module.input_names})

    def _build(self, graph, feed):
        try:
            from ..compiler import build

            params = dict(graph.attrs.get("params") or {})
            used = set(graph.index.input_names)  # a body may ignore some of its inputs
            feed = {k: np.asarray(v) for k, v in feed.items()
                    if k not in params and k in used}
            module = build(graph, target=self.target,
                           shape={k: v.shape for k, v in feed.items()},
                           dtype={k: v.dtype.name for k, v in feed.items()},
                           params=params, opt_level=2)
        except (NNVMError, ImportError):
            return None  # no compiler here, or a body the backend cannot build: interpret
        if hasattr(module, "set_num_threads"):
            module.set_num_threads(self.num_threads)
        return module
