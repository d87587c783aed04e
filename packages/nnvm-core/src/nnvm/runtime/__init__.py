"""Runtime: load a ``.nnvm`` artifact and run it (needs only core + the target's runtime)."""

from __future__ import annotations

from .module import Module

__all__ = ["Module", "load"]


def load(path: str) -> Module:
    """Load an exported artifact after verifying every member's sha256.

    Raises:
        SerializationError: the file is not an artifact, is corrupt, or was tampered with.
        BackendUnavailableError: the artifact's target is not installed or usable here.
    """
    from ..backend import get_backend, parse_target
    from .artifact import read_artifact

    artifact = read_artifact(path)
    target = parse_target(artifact.manifest["target"])
    return get_backend(target.kind).load(artifact)
