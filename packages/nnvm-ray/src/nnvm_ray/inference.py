"""``map_batches``: a compiled artifact over a Ray Dataset, one loaded module per actor.

This is Ray Data's pattern for model inference (a stateful callable class in
``Dataset.map_batches``): Ray starts a pool of actors, each runs the class's constructor
once (here: fetch and verify the artifact, load its kernels) and then receives batch after
batch. Loading once per actor instead of once per batch is the point: an llvm artifact maps
a shared library and packs its weights when it loads.

Faults: Ray Data creates pool actors with ``max_restarts=-1`` and ``max_task_retries=-1``
(its defaults; passing them again is deprecated since Ray 2.60), so an actor that dies
(killed, out of memory, its node lost) is restarted, loads the artifact again, and the
batches it held are run again. Ray Data keeps the result of exactly one
successful run of each batch, so the output holds every input row exactly once.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Sequence

import numpy as np
from nnvm import NNVMError
from nnvm.errors import format_error

from .runner import ArtifactRunner, Source, as_candidates, read_signature

#: How the actors get the artifact (``share=``).
SHARE_MODES = ("object_store", "path")


class ArtifactPredictor:
    """The callable class Ray Data instantiates once per actor.

    Args:
        artifacts: the candidates (one model compiled for one or more targets), each a
            one-element tuple holding an ``ObjectRef`` of the artifact's bytes (a nested ref
            is not resolved by Ray and stays alive while the job runs, so a restarted actor
            can fetch it again) or a path every node can open. The actor loads the one whose
            target ranks best among those its node can run.
        worker_column: when set, each output row gets the actor that ran it
            (``host:pid``) in this column.
    """

    def __init__(self, artifacts: list, worker_column: str | None = None):
        import ray

        sources = [ray.get(a[0]) if isinstance(a, tuple) else a for a in artifacts]
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
        self.runner = ArtifactRunner(sources, num_threads=max(1, int(cpus)) if cpus else None)
        self.inputs = set(self.runner.signature.input_names)
        self.worker_column = worker_column
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.runner.run_rows(batch, where="map_batches batch")
        rows = len(next(iter(outputs.values())))
        result = {k: v for k, v in batch.items() if k not in self.inputs}
        clash = sorted(set(result) & set(outputs))
        if clash:
            raise NNVMError(format_error(
                "map_batches", f"column(s) {', '.join(clash)} are both passed through and "
                "outputs of the model", fix="Rename or drop those columns before inference"))
        result.update(outputs)
        if self.worker_column:
            result[self.worker_column] = np.array([self.worker] * rows)
        return result


def map_batches(dataset, artifact: Source | Sequence[Source], *, batch_size: int | None = None,
                concurrency: int | tuple[int, int] = 1, num_cpus: float = 1,
                share: str = "object_store", worker_column: str | None = None):
    """Run a ``.nnvm`` artifact over a Ray Dataset; returns the (lazy) output Dataset.

    The dataset has one column per model input, one row per sample: row ``i`` of column
    ``x`` has the compiled shape of ``x`` without its leading batch dimension. The output
    has one column per model output (the artifact's output names) plus every column that is
    not a model input, unchanged (ids, file names), so rows can be matched to their inputs.

    Args:
        dataset: a ``ray.data.Dataset``.
        artifact: a ``.nnvm`` path or its bytes; or a list of them, the same model compiled
            for several targets (``cuda``, ``llvm``...), of which each actor loads the one
            whose target ranks best among those its node can run (a mixed cluster: GPU nodes
            run ``cuda``, the others ``llvm``). The driver verifies each (every sha256, the
            batch axis, one model) before any actor starts.
        batch_size: rows per Ray batch; default a multiple of the compiled batch size near
            256. Each batch runs in chunks of the compiled batch size (the last one padded).
        concurrency: actors in the pool: ``n``, or ``(min, max)`` to autoscale.
        num_cpus: CPUs Ray reserves per actor; also the actor's kernel threads (llvm).
        share: ``"object_store"`` (default): the driver puts the artifact's bytes in Ray's
            object store once and every actor, on any node, fetches them; ``"path"``: every
            actor opens ``artifact`` itself (the file must exist there on every node).
        worker_column: add a column naming the actor (``host:pid``) that ran each row.

    Each actor loads its artifact once with ``nnvm.runtime.load``; a node that can run
    none of the candidates' targets fails with each backend's reason.

    Raises:
        NNVMError: a bad ``share``, ``concurrency`` or ``batch_size``; an artifact that does
            not verify or has no batch axis.
    """
    import ray
    from ray.data import ActorPoolStrategy

    if share not in SHARE_MODES:
        raise NNVMError(format_error("map_batches", "unknown share mode", SHARE_MODES, share))
    candidates = as_candidates(artifact)
    if share == "path" and any(isinstance(a, (bytes, bytearray, memoryview)) for a in candidates):
        raise NNVMError(format_error("map_batches", "share='path' needs paths", "paths",
                                     "bytes", fix="Use share='object_store' for bytes"))
    signature = read_signature(candidates)
    if batch_size is None:
        batch_size = signature.batch * max(1, 256 // signature.batch)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise NNVMError(format_error("map_batches", "bad batch_size", "an int >= 1",
                                     repr(batch_size)))
    compute = ActorPoolStrategy(**_pool_size(concurrency))
    if share == "object_store":
        sources: list = [(ray.put(_read_bytes(a)),) for a in candidates]
    else:
        sources = [os.path.abspath(os.fspath(a)) for a in candidates]
    return dataset.map_batches(
        ArtifactPredictor, batch_size=batch_size, compute=compute, batch_format="numpy",
        fn_constructor_kwargs={"artifacts": sources, "worker_column": worker_column},
        num_cpus=num_cpus)


def _read_bytes(artifact: Source) -> bytes:
    if isinstance(artifact, (bytes, bytearray, memoryview)):
        return bytes(artifact)
    with open(os.fspath(artifact), "rb") as f:
        return f.read()


def _pool_size(concurrency: Any) -> dict[str, int]:
    ok = (isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency > 0)
    if ok:
        return {"size": concurrency}
    if (isinstance(concurrency, tuple) and len(concurrency) == 2
            and all(isinstance(c, int) and not isinstance(c, bool) for c in concurrency)
            and 0 < concurrency[0] <= concurrency[1]):
        return {"min_size": concurrency[0], "max_size": concurrency[1]}
    raise NNVMError(format_error("map_batches", "bad concurrency", "n >= 1 or (min, max) with "
                                 "1 <= min <= max", repr(concurrency)))
