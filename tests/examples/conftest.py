"""Make sure the example plugin package is installed, and registered in this process."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLUGIN_DIR = os.path.join(ROOT, "examples", "nnvm-example-plugin")


def ensure_example_plugin_installed() -> None:
    """pip-install examples/nnvm-example-plugin (editable, no deps) unless it already is.

    The hatch test environment lists it as a workspace member, so this is a no-op there.
    """
    try:
        importlib.metadata.version("nnvm-example-plugin")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e",
                           PLUGIN_DIR], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"pip install -e {PLUGIN_DIR} failed:\n{proc.stdout}\n{proc.stderr}")
    importlib.invalidate_caches()


@pytest.fixture(scope="session")
def example_plugin():
    """The plugin module, installed and loaded by nnvm in this process."""
    import nnvm
    from nnvm import plugin_manager

    ensure_example_plugin_installed()
    import nnvm_example.plugin as plugin

    if "example" not in {p.name for p in nnvm.plugins()}:
        # nnvm discovered entry points before the install above: register it by hand here
        # (test_entry_point_discovery checks discovery itself in a fresh interpreter)
        plugin_manager.register_plugin(plugin, "example")
    return plugin
