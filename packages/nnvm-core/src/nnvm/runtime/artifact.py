"""The one-file ``.nnvm`` artifact: a zip of manifest, graph JSON, params and backend members.

``manifest.json`` records the format version, the nnvm and plugin versions, the target, the
inputs and outputs, and the sha256 of every member. Loading verifies every hash (and refuses
members the manifest does not list) *before* anything is parsed or executed. A backend member
such as ``lib.so`` is native code: load only artifacts you trust.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Any

from ..errors import SerializationError

FORMAT = "nnvm-artifact"
FORMAT_VERSION = 1
MAX_TOTAL_BYTES = 8 << 30
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def write_artifact(path: str, module) -> None:
    """Export ``module`` (a ``nnvm.runtime.Module``) to ``path``."""
    from .. import __version__
    from .. import plugin_manager as plugins
    from ..serialization.param_dict import save_param_dict

    members: dict[str, bytes] = {"graph.json": module.graph.json().encode("utf-8"),
                                 "params.bin": save_param_dict(module.params)}
    for name, data in module._artifact_members().items():
        if name in members or name == "manifest.json" or "/" in name or name.startswith("."):
            raise SerializationError(f"export: backend member name {name!r} is reserved or "
                                     f"not a plain file name")
        members[name] = bytes(data)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "nnvm_version": __version__,
        "plugins": {p.name: p.version for p in plugins.plugins()},
        "target": module.target,
        "inputs": [{"name": n, "shape": _list(module.input_shapes.get(n)),
                    "dtype": module.input_dtypes.get(n)} for n in module.input_names],
        "outputs": [{"name": n, "shape": _list(s), "dtype": d} for n, s, d in
                    zip(module.output_names, module.output_shapes, module.output_dtypes)],
        "members": {n: hashlib.sha256(b).hexdigest() for n, b in members.items()},
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [("manifest.json", json.dumps(manifest, indent=1).encode())] + \
                sorted(members.items()):
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def _list(shape) -> list | None:
    return None if shape is None else list(shape)


class Artifact:
    """A verified artifact: ``manifest``, raw ``members`` and lazily parsed graph/params."""

    def __init__(self, manifest: dict, members: dict[str, bytes]):
        self.manifest = manifest
        self.members = members
        self._params: dict | None = None

    def graph(self):
        from ..serialization.graph_json import load_json

        return load_json(self.members["graph.json"])

    @property
    def params(self) -> dict:
        if self._params is None:
            from ..serialization.param_dict import load_param_dict

            self._params = load_param_dict(self.members["params.bin"])
        return self._params


def read_artifact(path: str) -> Artifact:
    """Open and verify an artifact. Raises SerializationError on any inconsistency."""
    where = f"artifact '{path}'"
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise SerializationError(f"{where}: file not found") from None
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise SerializationError(f"{where}: not an NNVM artifact (not a zip file: {exc})"
                                 ) from None
    with zf:
        infos = zf.infolist()
        if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
            raise SerializationError(f"{where}: members expand to more than 8 GiB; refusing")
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            raise SerializationError(f"{where}: duplicate member names; the file was tampered "
                                     f"with")
        if "manifest.json" not in names:
            raise SerializationError(f"{where}: no manifest.json; not an NNVM artifact")
        try:
            manifest = json.loads(zf.read("manifest.json"))
        except (json.JSONDecodeError, UnicodeDecodeError, zipfile.BadZipFile, OSError,
                RecursionError) as exc:
            raise SerializationError(f"{where}: manifest.json unreadable ({exc})") from None
        _check_manifest(manifest, where)
        listed = manifest["members"]
        extra = sorted(set(names) - set(listed) - {"manifest.json"})
        if extra:
            raise SerializationError(f"{where}: members not listed in the manifest: {extra}; "
                                     f"refusing a tampered file")
        members = {}
        for name, digest in listed.items():
            if name not in names:
                raise SerializationError(f"{where}: member '{name}' is missing")
            try:
                data = zf.read(name)
            except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
                raise SerializationError(f"{where}: member '{name}' is corrupt ({exc})") from None
            if hashlib.sha256(data).hexdigest() != digest:
                raise SerializationError(f"{where}: member '{name}' fails its sha256 check; the "
                                         f"file was modified after export. Refusing to load it")
            members[name] = data
    for required in ("graph.json", "params.bin"):
        if required not in members:
            raise SerializationError(f"{where}: member '{required}' is missing")
    return Artifact(manifest, members)


def _check_manifest(m: Any, where: str) -> None:
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise SerializationError(f"{where}: manifest is not an NNVM artifact manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise SerializationError(f"{where}: format version {m.get('format_version')!r}; this "
                                 f"nnvm reads version {FORMAT_VERSION}. Re-export with this "
                                 f"version of nnvm")
    if not isinstance(m.get("target"), str) or not isinstance(m.get("members"), dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in m["members"].items()):
        raise SerializationError(f"{where}: manifest lacks a target or member hashes")
