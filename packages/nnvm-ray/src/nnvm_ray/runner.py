"""Run a compiled ``.nnvm`` artifact over any number of rows (no Ray here).

An artifact is compiled for fixed shapes, e.g. ``x: (4, 8)``. A dataset has rows: one row
of ``x`` is ``x[i]``, of shape ``(8,)``. The leading axis of every input and output is the
*batch axis*; the runner cuts a batch of any length into chunks of the compiled batch size
(4 here), pads the last chunk by repeating its last row (``nnvm.runtime.batching.batch_chunk``:
no made-up values reach the kernels) and drops the padded rows of the outputs. This
assumes what the batch axis means in inference models: rows do not mix. A file holding
exactly the compiled batch runs in one call, so its outputs are those of running the
artifact directly.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

import numpy as np
from nnvm import NNVMError
from nnvm.errors import format_error
from nnvm.runtime.batching import batch_chunk


#: An artifact: a ``.nnvm`` path or the file's bytes.
Source = Union[str, os.PathLike, bytes]


@dataclass(frozen=True)
class Port:
    """One input or output of an artifact: name, compiled shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def row_shape(self) -> tuple[int, ...]:
        return self.shape[1:]


@dataclass(frozen=True)
class Signature:
    """The inputs, outputs and batch size of an artifact (what a row of data must be)."""

    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    batch: int

    @classmethod
    def from_ports(cls, inputs: list[Port], outputs: list[Port], where: str) -> Signature:
        """Check that every port has the same leading (batch) dimension."""
        for p in inputs + outputs:
            if p.shape is None or p.dtype is None:
                raise NNVMError(format_error(
                    where, f"'{p.name}' has no compiled shape or dtype",
                    fix="Re-export the artifact with this version of nnvm"))
        leading = {p.name: (p.shape[0] if p.shape else None) for p in inputs + outputs}
        if len(set(leading.values())) != 1 or None in leading.values() or not inputs:
            raise NNVMError(format_error(
                where, "inputs and outputs share no batch axis", "one leading dimension "
                "common to every input and output", leading,
                fix="Compile the model with a leading batch dimension, e.g. x=(B, ...)"))
        return cls(tuple(inputs), tuple(outputs), next(iter(leading.values())))

    @classmethod
    def of_manifest(cls, manifest: Mapping[str, Any], where: str) -> Signature:
        """From an artifact's manifest (``nnvm.runtime.artifact.read_artifact``)."""
        def ports(key: str) -> list[Port]:
            return [Port(d["name"], tuple(d["shape"]) if d.get("shape") is not None else None,
                         d.get("dtype")) for d in manifest[key]]

        return cls.from_ports(ports("inputs"), ports("outputs"), where)

    @classmethod
    def of_module(cls, module, where: str) -> Signature:
        """From a loaded ``nnvm.runtime.Module``."""
        inputs = [Port(n, tuple(module.input_shapes[n]), module.input_dtypes[n])
                  for n in module.input_names]
        outputs = [Port(n, tuple(s), d) for n, s, d in
                   zip(module.output_names, module.output_shapes, module.output_dtypes)]
        return cls.from_ports(inputs, outputs, where)

    def rows_key(self) -> tuple:
        """What a row looks like in and out (names, row shapes, dtypes), batch left out."""
        return tuple((p.name, p.row_shape, p.dtype) for p in self.inputs + self.outputs)

    @property
    def input_names(self) -> list[str]:
        return [p.name for p in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [p.name for p in self.outputs]

    def check_rows(self, columns: Mapping[str, Any], where: str) -> dict[str, np.ndarray]:
        """The input columns as arrays of rows, checked: every input present, row shapes
        and dtypes as compiled (no silent casts), one row count. Returns name -> array."""
        missing = [n for n in self.input_names if n not in columns]
        if missing:
            raise NNVMError(format_error(where, f"missing input(s) {', '.join(missing)}",
                                         self.input_names, sorted(columns),
                                         fix="Name the columns (or .npz keys) after the "
                                             "model's inputs (nnvm inspect MODEL.nnvm)"))
        arrays = {}
        for p in self.inputs:
            arr = as_rows(columns[p.name], p.row_shape)
            if arr.ndim == 0 or tuple(arr.shape[1:]) != p.row_shape:
                raise NNVMError(format_error(
                    f"{where}, input '{p.name}'", "wrong row shape", f"(rows, "
                    f"{', '.join(map(str, p.row_shape))})", tuple(arr.shape),
                    fix=f"Every row must have the compiled shape {p.row_shape}"))
            if arr.dtype.name != p.dtype:
                raise NNVMError(format_error(
                    f"{where}, input '{p.name}'", "wrong dtype (inputs are not cast silently)",
                    p.dtype, arr.dtype.name, fix=f"Store the data as {p.dtype}"))
            arrays[p.name] = arr
        counts = {n: len(a) for n, a in arrays.items()}
        if len(set(counts.values())) != 1:
            raise NNVMError(format_error(where, "inputs have different row counts",
                                         "one count", counts))
        return arrays


def as_rows(column: Any, row_shape: tuple[int, ...]) -> np.ndarray:
    """A column as one array ``(rows, *row_shape)``.

    Ray and Arrow hand over ragged or list-typed columns as object arrays of per-row arrays
    (or flat lists); those are stacked and, when the sizes agree, reshaped to the row shape."""
    arr = np.asarray(column)
    if arr.dtype == object and arr.ndim == 1 and len(arr):
        rows = [np.asarray(r) for r in arr]
        if all(r.size == int(np.prod(row_shape)) for r in rows):
            return np.stack([r.reshape(row_shape) for r in rows])
        return np.asarray(rows, dtype=object)
    return arr


@contextlib.contextmanager
def artifact_file(artifact: Source):
    """A path to ``artifact``: the path itself, or for bytes a private temporary file that
    is removed afterwards (so bytes go through exactly the checks a file does)."""
    if not isinstance(artifact, (bytes, bytearray, memoryview)):
        yield os.fspath(artifact)
        return
    fd, path = tempfile.mkstemp(suffix=".nnvm", prefix="nnvm-ray-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(artifact)
        yield path
    finally:
        os.unlink(path)


def load_module(artifact: Source):
    """``nnvm.runtime.load`` on a path or on artifact bytes: every sha256 verified, then the
    target's backend looked up, then the trust policy applied when one is set."""
    import nnvm

    with artifact_file(artifact) as path:
        return nnvm.runtime.load(path)


def _where(artifact: Source) -> str:
    return ("artifact (bytes)" if isinstance(artifact, (bytes, bytearray, memoryview))
            else f"artifact '{os.fspath(artifact)}'")


def _manifest(artifact: Source) -> dict:
    """The verified manifest (every member's sha256 checked), without loading any code."""
    from nnvm.runtime.artifact import read_artifact

    with artifact_file(artifact) as path:
        return read_artifact(path).manifest


def read_signature(artifacts: Source | Sequence[Source]) -> Signature:
    """The signature of an artifact, or the one all candidates share, from their verified
    manifests without loading any code (the driver of a Ray job may lack their targets).

    Candidates (one model compiled for several targets) must agree on every input and
    output: name, row shape and dtype; their compiled batch sizes may differ."""
    candidates = as_candidates(artifacts)
    sigs = [Signature.of_manifest(_manifest(a), _where(a)) for a in candidates]
    for a, sig in zip(candidates[1:], sigs[1:]):
        if sig.rows_key() != sigs[0].rows_key():
            raise NNVMError(format_error(
                _where(a), "is not the same model as the first artifact", sigs[0].rows_key(),
                sig.rows_key(), fix="Pass artifacts of one model compiled for different "
                                    "targets"))
    return sigs[0]


def as_candidates(artifacts: Source | Sequence[Source]) -> list[Source]:
    """One artifact or a list of them, as a non-empty list."""
    if isinstance(artifacts, (str, os.PathLike, bytes, bytearray, memoryview)):
        return [artifacts]
    candidates = list(artifacts)
    if not candidates:
        raise NNVMError(format_error("artifacts", "none given", "a path, bytes or a list "
                                     "of them", "an empty list"))
    return candidates


def choose_artifact(artifacts: Source | Sequence[Source]) -> Source:
    """The candidate whose target ranks best (``Backend.priority``, as ``best_target``)
    among those this machine can run; the first one on a tie.

    Raises:
        BackendUnavailableError: no candidate's target is usable here (each one's reason).
    """
    import socket

    from nnvm import plugin_manager
    from nnvm.errors import BackendUnavailableError

    candidates = as_candidates(artifacts)
    if len(candidates) == 1:
        return candidates[0]
    backends = plugin_manager.backends()
    usable, reasons = [], []
    for i, a in enumerate(candidates):
        kind = str(_manifest(a)["target"]).split()[0]
        reason = backends[kind].is_available() if kind in backends else "plugin not installed"
        if reason is None:
            usable.append((backends[kind].priority, -i, a))
        else:
            reasons.append(f"{kind}: {reason}")
    if not usable:
        raise BackendUnavailableError(format_error(
            f"host {socket.gethostname()}", "none of the artifacts' targets can run here",
            fix="; ".join(reasons)))
    return max(usable, key=lambda u: u[:2])[2]


class ArtifactRunner:
    """A loaded artifact that runs rows in chunks of its compiled batch size.

    Args:
        artifact: a ``.nnvm`` path or its bytes, or a list of them: the same model compiled
            for several targets, of which the best one this machine can run is loaded
            (``choose_artifact``).
        num_threads: kernel threads for targets that have a thread pool (llvm); None keeps
            the target's default. A Ray actor passes the CPUs Ray gave it, so two actors on a
            two-core node do not each start two threads.
    """

    def __init__(self, artifact: Source | Sequence[Source], num_threads: int | None = None):
        self.module = load_module(choose_artifact(artifact))
        self.signature = Signature.of_module(self.module, f"artifact ({self.module.target})")
        if num_threads and hasattr(self.module, "set_num_threads"):
            self.module.set_num_threads(int(num_threads))

    @property
    def target(self) -> str:
        return self.module.target

    def run_rows(self, columns: Mapping[str, Any], where: str = "batch") -> dict[str, np.ndarray]:
        """Outputs (name -> ``(rows, *row_shape)``) for input columns of any row count."""
        sig = self.signature
        arrays = sig.check_rows(columns, where)
        n = len(next(iter(arrays.values())))
        pieces: list[list[np.ndarray]] = [[] for _ in sig.outputs]
        for start in range(0, n, sig.batch):
            take = min(sig.batch, n - start)
            feed = {k: np.ascontiguousarray(batch_chunk(a, 0, start, take, sig.batch))
                    for k, a in arrays.items()}
            for got, out in zip(pieces, self.module.run(**feed)):
                got.append(np.asarray(out)[:take])
        return {p.name: (np.concatenate(got) if got else np.empty((0, *p.row_shape), p.dtype))
                for p, got in zip(sig.outputs, pieces)}

