"""NNVM on Ray: batch inference over datasets with compiled ``.nnvm`` artifacts.

``map_batches(dataset, artifact, batch_size=..., concurrency=...)`` runs an artifact over a
Ray Dataset with one loaded module per Ray actor; the ``nnvm batch`` command does the same
for a folder of ``.npz`` files or a Parquet file. Ray is imported when these run, not when
this package is imported.
"""

from __future__ import annotations

from .inference import map_batches
from .runner import ArtifactRunner

__version__ = "0.4.0"
__all__ = ["ArtifactRunner", "map_batches"]
