"""The OpenCL devices the backend tests run on: every *usable* one (the backend's probe kernel
builds and runs), each as a target string, so both CPU drivers (PoCL and Intel's runtime) are
tested wherever they work and neither is assumed.

``REASON`` is None when at least one device is usable, else the probe's reason (tests skip
with it). ``TARGETS`` is ``[(id, target string)]``, the default (fastest) device first.
"""

from __future__ import annotations

import re

from nnvm.backend import get_backend
from nnvm.errors import BackendUnavailableError


def _reason():
    try:
        return get_backend("opencl", require_available=False).is_available()
    except BackendUnavailableError as exc:  # plugin not installed
        return str(exc)


def _targets() -> list[tuple[str, str]]:
    if REASON is not None:
        return []
    from nnvm_opencl import device as devices

    out = []
    for p, d in devices.usable():
        m = re.match(r"[a-z0-9]+", p.name.strip().lower())  # "Intel(R) OpenCL" -> "intel"
        word = m.group(0) if m else str(len(out))
        out.append((word, f"opencl -platform={word}"))
    return out


REASON = _reason()
TARGETS = _targets()
