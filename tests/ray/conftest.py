"""Ray tests share one small local cluster per module and one compiled MLP artifact.

The cluster is kept light for a 2-core box (two CPUs, a 200 MB object store, no dashboard);
a module that uses ``ray_local`` skips with the reason when Ray is not importable.
"""

from __future__ import annotations

import pytest
from ray_helpers import build_mlp


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("model") / "mlp.nnvm"
    build_mlp().export(str(path))
    return str(path)


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray cluster for the module (``ray.init(num_cpus=2)``), shut down after it."""
    ray = pytest.importorskip("ray", reason="ray not importable: pip install nnvm-ray")
    pytest.importorskip("ray.data", reason="ray.data not importable: pip install 'ray[data]'")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, object_store_memory=200 * 2**20, include_dashboard=False,
             log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()
