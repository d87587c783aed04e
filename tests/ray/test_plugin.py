"""The entry point imports without Ray: availability is a reason string, and neither
``import nnvm_ray`` nor building the ``nnvm`` parser imports Ray or pyarrow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys
    for blocked in sys.argv[1:]:
        sys.modules[blocked] = None  # import fails as if not installed
    import nnvm
    from nnvm import cli
    import nnvm_ray
    args = cli.build_parser().parse_args(["batch", "m.nnvm", "--input", "i", "--output", "o"])
    info = {p.name: p for p in nnvm.plugins()}["ray"]
    print(json.dumps({"heavy": sorted(m for m in ("ray", "pyarrow", "pandas")
                                      if sys.modules.get(m) is not None),
                      "batch": args.func.__module__ == "nnvm_ray.batch_cli",
                      "summary": nnvm_ray.plugin.nnvm_plugin_info()["summary"],
                      "available": nnvm_ray.plugin.nnvm_plugin_info()["available"]}))
""")


def _probe(*blocked: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNVM_")}
    run = subprocess.run([sys.executable, "-c", SCRIPT, *blocked], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_discovery_imports_no_ray():
    import importlib.util

    got = _probe()
    assert got["heavy"] == [] and got["batch"]
    has_ray = importlib.util.find_spec("ray") and importlib.util.find_spec("pyarrow")
    assert (got["available"] is None) == bool(has_ray), got["available"]


def test_without_ray_the_plugin_loads_and_says_why_it_is_unavailable():
    got = _probe("ray")
    assert got["batch"]
    assert got["available"] == "ray not importable: pip install nnvm-ray (it brings ray[data])"
    assert "unavailable" in got["summary"]
