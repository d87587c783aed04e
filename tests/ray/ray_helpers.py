"""Helpers of the Ray tests: the MLP they run and the oracle (the artifact run directly)."""

from __future__ import annotations

import numpy as np

#: The artifact's compiled batch: rows run in chunks of this many.
BATCH = 4
FEATURES = 8


def build_mlp(target: str = "reference"):
    """A two-layer MLP over ``x: (BATCH, FEATURES)`` built with ``nnvm.symbol``."""
    import nnvm
    from nnvm import sym

    x = sym.Variable("x")
    h = sym.relu(sym.dense(x, units=16, name="fc1"))
    y = sym.softmax(sym.dense(h, units=3, name="fc2"), name="prob")
    rng = np.random.default_rng(7)
    params = {"fc1_weight": rng.standard_normal((16, FEATURES)),
              "fc1_bias": rng.standard_normal(16),
              "fc2_weight": rng.standard_normal((3, 16)), "fc2_bias": rng.standard_normal(3)}
    params = {k: v.astype("float32") for k, v in params.items()}
    return nnvm.compiler.build(nnvm.graph.create(y), target=target,
                               shape={"x": (BATCH, FEATURES)}, params=params)


def artifact_claiming(folder, target: str) -> str:
    """The MLP in an artifact whose manifest names ``target``: a real, verifiable file for
    choosing among candidates, which reads the manifest only."""
    lib = build_mlp()
    lib.target = target
    path = str(folder / f"mlp-{target}.nnvm")
    lib.export(path)
    return path


def direct(artifact: str, x: np.ndarray) -> np.ndarray:
    """The oracle: the artifact run directly, ``BATCH`` rows per call."""
    import nnvm

    module = nnvm.runtime.load(artifact)
    assert len(x) % BATCH == 0
    return np.concatenate([module.run(x=x[i:i + BATCH])[0] for i in range(0, len(x), BATCH)])


def llvm_reason() -> str | None:
    """Why the llvm target cannot build here (None if it can)."""
    from nnvm.backend import build_reason, get_backend
    from nnvm.errors import BackendUnavailableError

    try:
        return build_reason(get_backend("llvm", require_available=False))
    except BackendUnavailableError as exc:
        return str(exc)
