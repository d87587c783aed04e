"""The documentation site (guides + API reference from docstrings) builds with no warning.

``mkdocs build --strict`` fails on a docstring that documents a parameter the signature does
not have, a reference to a moved function, or a broken page: the API reference cannot drift
from the code unnoticed.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("mkdocs", reason="the docs site needs mkdocs (hatch test env installs it)")
pytest.importorskip("mkdocstrings", reason="the API reference needs mkdocstrings[python]")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_docs_site_builds_strict(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    api = tmp_path / "site" / "api" / "runtime" / "index.html"
    assert "InferenceSession" in api.read_text()
