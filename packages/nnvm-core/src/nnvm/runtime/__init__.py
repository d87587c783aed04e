"""Runtime: load a ``.nnvm`` artifact and run it (needs only core + the target's runtime)."""

from __future__ import annotations

from . import graph_runtime
from .module import Module

__all__ = ["Module", "graph_runtime", "load"]


def load(path: str) -> Module:
    """Load an exported artifact.

    Order matters: every member's sha256 (and the manifest's own) is verified first; then
    the target's backend is looked up (so a missing plugin is reported as such, not as an
    unknown op); then graph and params are parsed and checked against the manifest; only
    then does the backend create the module (and, for native targets, load code).

    Raises:
        SerializationError: the file is not an artifact, is corrupt, or was tampered with.
        BackendUnavailableError: the artifact's target is not installed or usable here.
    """
    from ..backend import get_backend, parse_target
    from .artifact import read_artifact

    artifact = read_artifact(path)
    target = parse_target(artifact.manifest["target"])
    backend = get_backend(target.kind)
    artifact.check_consistency()
    return backend.load(artifact)
