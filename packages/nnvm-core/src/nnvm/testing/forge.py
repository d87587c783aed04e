"""Forge artifacts as an attacker with write access to the file would, for tests of the
integrity and signature checks: the sha256s in the manifest detect corruption, and a
forger simply recomputes them; only a signature (``nnvm.runtime.signing``) tells."""

from __future__ import annotations

import hashlib
import json
import zipfile

from ..runtime.artifact import manifest_digest


def rewrite_member(src: str, dst: str, name: str, data: bytes) -> None:
    """Write ``src`` to ``dst`` with member ``name`` replaced by ``data`` and every sha256
    and size in the manifest fixed to match (a signature member is kept as it was)."""
    with zipfile.ZipFile(src) as zf:
        members = {i.filename: zf.read(i.filename) for i in zf.infolist()}
    manifest = json.loads(members.pop("manifest.json"))
    members[name] = data
    manifest["members"][name] = hashlib.sha256(data).hexdigest()
    manifest["member_sizes"][name] = len(data)
    manifest["manifest_sha256"] = manifest_digest(manifest)
    with zipfile.ZipFile(dst, "w") as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        for k, v in members.items():
            zf.writestr(k, v)
