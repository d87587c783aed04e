"""Joining or starting a Ray cluster for one command, quietly."""

from __future__ import annotations

import contextlib
import logging
import os

from nnvm import NNVMError
from nnvm.errors import format_error


def ray_reason() -> str | None:
    """Why Ray Data cannot be used here (None if it can), without importing Ray."""
    import importlib.util

    for module in ("ray", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} not importable: pip install nnvm-ray (it brings ray[data])"
    return None


@contextlib.contextmanager
def ray_cluster(address: str, cpus: int | None = None):
    """Connected to Ray for the ``with`` body; yields the cluster's CPU count.

    ``address`` is ``"local"`` (start a cluster in this process with ``cpus`` CPUs, or one
    per core) or a running cluster's address (``ray start --head`` prints it; ``"auto"``
    finds one on this machine). If this process is already connected (a notebook, a test),
    that connection is used as it is and left open.
    """
    reason = ray_reason()
    if reason:
        raise NNVMError(format_error("--ray", "Ray is not available", fix=reason))
    import ray
    import ray.data

    owned = not ray.is_initialized()
    if owned:
        # Ray's C++ core logs a warning per actor whose constructor arguments sit in the
        # object store (Ray Data's always do); errors still show.
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
        quiet = {"include_dashboard": False, "log_to_driver": False,
                 "logging_level": logging.ERROR}
        try:
            if address == "local":
                ray.init(num_cpus=cpus or os.cpu_count(), **quiet)
            else:
                ray.init(address=address, **quiet)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise NNVMError(format_error(
                f"--ray '{address}'", f"cannot connect ({' '.join(str(exc).split())[:200]})",
                fix="Start a cluster with 'ray start --head' and pass the address it "
                    "prints, or use --ray local")) from None
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    try:
        yield max(1, int(ray.cluster_resources().get("CPU", 1)))
    finally:
        if owned:
            ray.shutdown()
