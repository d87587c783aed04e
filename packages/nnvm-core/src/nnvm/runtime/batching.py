"""Modules that run any batch size: one build at a fixed batch, or one build per shape.

``BatchedModule`` wraps a module compiled for a batch of ``bucket`` samples whose graph was
proven batch-separable (``nnvm.compiler.batch_axis``): a fed batch of ``n`` samples is split
into runs of ``bucket`` along each input's batch axis (the last run padded by repeating its
last sample, so no made-up values reach the kernels), and the outputs are concatenated
along each output's batch axis, the padding dropped. Nothing is recompiled, whatever ``n``.

``PerShapeModule`` is the fallback for graphs whose samples are not independent (a
reduction over the batch, a batch folded into another dimension...): it builds once per
new input shape signature and keeps every build.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from ..errors import ExecutionError, NNVMError, format_error
from .module import Module


def symbolic_shape(shape, axis: int | None, name: str) -> tuple | None:
    """``shape`` with dimension ``axis`` replaced by ``name`` (the symbolic batch)."""
    if shape is None or axis is None:
        return None if shape is None else tuple(shape)
    return tuple(name if k == axis else d for k, d in enumerate(shape))


class BatchedModule(Module):
    """A module compiled once for ``bucket`` samples that runs batches of any size.

    Attributes:
        bucket_module: the compiled module (runs exactly ``bucket`` samples).
        bucket: the batch size it was compiled for.
        plan: the ``BatchPlan`` (input and output batch axes).
        runs: how many bucket runs have been made (for tests and profiling).
    """

    _reentrant = True  # each call only calls bucket_module.run, itself thread-safe

    def __init__(self, bucket_module: Module, plan, bucket: int, dim_name: str = "N"):
        super().__init__(bucket_module.graph, bucket_module.params, bucket_module.target)
        self.bucket_module = bucket_module
        self.bucket = int(bucket)
        self.plan = plan
        self.dim_name = dim_name
        self.runs = 0
        self.output_names = list(bucket_module.output_names)
        self.input_shapes = {n: symbolic_shape(s, plan.inputs.get(n), dim_name)
                             for n, s in bucket_module.input_shapes.items()}
        self.output_shapes = [symbolic_shape(s, a, dim_name)
                              for s, a in zip(bucket_module.output_shapes, plan.outputs)]

    def _shape_fits(self, name: str, shape: tuple) -> bool:
        want = self.input_shapes[name]
        return len(shape) == len(want) and all(
            isinstance(w, str) or int(w) == g for w, g in zip(want, shape))

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        inner = self.bucket_module
        batched = {k: a for k, a in self.plan.inputs.items() if k in feed}
        sizes = {feed[k].shape[a] for k, a in batched.items()}
        if len(sizes) != 1:
            raise ExecutionError(format_error(
                "run", f"the batched inputs disagree on the batch size {self.dim_name}",
                "one size", {k: feed[k].shape[a] for k, a in batched.items()},
                fix="Feed the same number of samples to every batched input"))
        n = sizes.pop()
        if n == 0:
            raise ExecutionError(format_error("run", f"batch {self.dim_name} is empty",
                                              "at least 1 sample", 0))
        fixed = {k: v for k, v in feed.items() if k not in batched and
                 (k in self.input_names or v is not inner.params.get(k))}
        if n == self.bucket:
            self.runs += 1
            return inner.run(**fixed, **{k: feed[k] for k in batched})
        parts: list[list[np.ndarray]] = []
        for start in range(0, n, self.bucket):
            count = min(self.bucket, n - start)
            chunk = {k: batch_chunk(feed[k], a, start, count, self.bucket) for k, a in batched.items()}
            outs = inner.run(**fixed, **chunk)
            self.runs += 1
            parts.append([o if a is None else np.take(o, range(count), axis=a)
                          if count < self.bucket else o
                          for o, a in zip(outs, self.plan.outputs)])
        return [parts[0][k] if a is None else np.concatenate([p[k] for p in parts], axis=a)
                for k, a in enumerate(self.plan.outputs)]

    def _num_kernels(self) -> int:
        return self.bucket_module._num_kernels()

    def stats(self) -> dict[str, Any]:
        return {**self.bucket_module.stats(), "batch_bucket": self.bucket}

    def export(self, path: str, sign_key: Any = None) -> None:
        raise NNVMError(format_error(
            "export", "a module with a symbolic batch has no single-file form yet",
            fix=f"Export module.bucket_module (it runs batches of exactly {self.bucket}), or "
                "use nnvm.InferenceSession, whose disk cache keeps the batch plan"))


def batch_chunk(arr: np.ndarray, axis: int, start: int, count: int, bucket: int) -> np.ndarray:
    """Samples ``start:start+count`` along ``axis``, padded to ``bucket`` by repeating the
    last one (a real sample: padding with zeros could raise warnings in log/div kernels).
    Shared by every runner that feeds a fixed-batch module (``BatchedModule``, nnvm-ray)."""
    index = [slice(None)] * arr.ndim
    index[axis] = slice(start, start + count)
    part = arr[tuple(index)]
    if count == bucket:
        return part
    pad = [(0, 0)] * arr.ndim
    pad[axis] = (0, bucket - count)
    return np.pad(part, pad, mode="edge")


class PerShapeModule(Module):
    """One build per input shape signature, each kept (``builds`` counts them): the fallback
    for graphs that cannot be split along the batch, and, with ``key_of`` (the values of the
    other symbolic dimensions), one batch-splitting module per sequence length or image
    size."""

    _reentrant = True

    def __init__(self, graph, params: dict, target: str, build_for: Callable[[dict], Module],
                 symbolic: dict[str, tuple], key_of: Callable[[dict], tuple] | None = None):
        super().__init__(graph, params, target)
        self._build_for = build_for
        self._key_of = key_of or (lambda shapes: tuple(sorted(shapes.items())))
        self._built: dict[tuple, Module] = {}
        self._build_lock = threading.Lock()
        self.input_shapes = {n: symbolic.get(n, s) for n, s in self.input_shapes.items()}
        self.output_shapes = [None] * len(self.output_names)
        self.builds = 0

    def _shape_fits(self, name: str, shape: tuple) -> bool:
        return BatchedModule._shape_fits(self, name, shape)  # type: ignore[arg-type]

    def module_for(self, shapes: dict[str, tuple]) -> Module:
        key = self._key_of(shapes)
        with self._build_lock:
            if key not in self._built:
                self._built[key] = self._build_for(dict(shapes))
                self.builds += 1
            return self._built[key]

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        shapes = {k: tuple(feed[k].shape) for k in self.input_names}
        module = self.module_for(shapes)
        return module.run(**{k: feed[k] for k in self.input_names})

    def export(self, path: str, sign_key: Any = None) -> None:
        raise NNVMError(format_error(
            "export", "this module builds one kernel set per batch size",
            fix="Build with concrete shapes (shape={...} of ints) to export"))
