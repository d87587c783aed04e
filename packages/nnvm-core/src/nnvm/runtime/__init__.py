"""Runtime: load a ``.nnvm`` artifact and run it (needs only core + the target's runtime)."""

from __future__ import annotations

from typing import Any

from . import graph_runtime
from .module import Module

__all__ = ["Module", "graph_runtime", "load"]


def load(path: str, trusted_keys: Any = None) -> Module:
    """Load an exported artifact.

    ``trusted_keys`` (public key files from ``nnvm keygen``, or key objects) sets a trust
    policy: the artifact must carry a valid signature by one of them, checked before anything
    else is read (so no native code of an untrusted file is ever mapped). None falls back to
    the ``NNVM_TRUSTED_KEYS`` environment variable; no policy means no signature check
    (``nnvm.runtime.signing``).

    Order matters: every member's sha256 (and the manifest's own) is verified first; then
    the target's backend is looked up (so a missing plugin is reported as such, not as an
    unknown op); then graph and params are parsed and checked against the manifest; only
    then does the backend create the module (and, for native targets, load code).

    Raises:
        SerializationError: the file is not an artifact, is corrupt, or was tampered with.
        BackendUnavailableError: the artifact's target is not installed or usable here.
        SignatureError: under a trust policy, unsigned, wrongly signed or by another key.
    """
    from ..backend import get_backend, parse_target
    from .artifact import read_artifact

    artifact = read_artifact(path, trusted_keys=trusted_keys)
    target = parse_target(artifact.manifest["target"])
    backend = get_backend(target.kind)
    artifact.check_consistency()
    from .host_tail import attach_host_tail

    return attach_host_tail(backend.load(artifact), artifact)  # data-dependent shapes
