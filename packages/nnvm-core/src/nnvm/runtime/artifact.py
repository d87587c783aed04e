"""The one-file ``.nnvm`` artifact: a zip of manifest, graph JSON, params and backend members.

``manifest.json`` records the format version, the nnvm and plugin versions, the target, the
inputs and outputs, the sha256 of every member and its own sha256 (``manifest_sha256``, over
the canonical JSON of the other fields). Loading verifies the manifest's digest and every
member's hash, and refuses members the manifest does not list, *before* anything else is
parsed or executed; only then are graph and params read and checked against the manifest.

The hashes detect corruption and edits, not forgery: whoever can rewrite the file can rewrite
the hashes. A backend member such as ``lib.so`` is native code: load only artifacts you trust.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
import zlib
from typing import Any

from ..errors import SerializationError

FORMAT = "nnvm-artifact"
FORMAT_VERSION = 1
MAX_TOTAL_BYTES = 8 << 30
MAX_MANIFEST_BYTES = 16 << 20
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, RuntimeError,
                NotImplementedError)


def manifest_digest(manifest: dict) -> str:
    """sha256 of the canonical JSON of ``manifest`` without its ``manifest_sha256`` field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def write_artifact(path: str, module) -> None:
    """Export ``module`` (a ``nnvm.runtime.Module``) to ``path`` (written atomically)."""
    from .. import __version__
    from .. import plugin_manager as plugins
    from ..serialization.param_dict import save_param_dict

    members: dict[str, bytes] = {"graph.json": module.graph.json().encode("utf-8"),
                                 "params.bin": save_param_dict(module.params)}
    for name, data in module._artifact_members().items():
        if name in members or name == "manifest.json" or "/" in name or "\\" in name or \
                name.startswith("."):
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
    manifest["manifest_sha256"] = manifest_digest(manifest)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [("manifest.json", json.dumps(manifest, indent=1).encode())] + \
                sorted(members.items()):
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".nnvm-export-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, path)  # a crash mid-write never leaves a half-written artifact
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _list(shape) -> list | None:
    return None if shape is None else list(shape)


class Artifact:
    """A verified artifact: ``manifest``, raw ``members`` and lazily parsed graph/params."""

    def __init__(self, manifest: dict, members: dict[str, bytes], path: str = "<memory>"):
        self.manifest = manifest
        self.members = members
        self.path = path
        self._graph = None
        self._params: dict | None = None

    @property
    def target(self) -> str:
        return self.manifest["target"]

    def graph(self):
        """The graph (parsed once from ``graph.json``; the hashes were checked already)."""
        if self._graph is None:
            from ..serialization.graph_json import load_json

            self._graph = load_json(self.members["graph.json"])
        return self._graph

    @property
    def params(self) -> dict:
        if self._params is None:
            from ..serialization.param_dict import load_param_dict

            self._params = load_param_dict(self.members["params.bin"])
        return self._params

    def check_consistency(self) -> None:
        """Parse graph and params and check them against the manifest's inputs and outputs.

        Raises:
            SerializationError: the manifest describes another graph than the one inside.
        """
        where = f"artifact '{self.path}'"
        graph, params = self.graph(), self.params
        idx = graph.index
        shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
        dtypes = graph.attrs.get("dtype") or [None] * idx.num_node_entries
        unknown = sorted(set(params) - set(idx.input_names))
        if unknown:
            raise SerializationError(f"{where}: params.bin holds {unknown}, which are not "
                                     f"inputs of graph.json")
        rptr = idx.entry_rptr
        inputs = [{"name": idx.nodes[i].name, "shape": _list(shapes[rptr[i]]),
                   "dtype": dtypes[rptr[i]]} for i in idx.input_nodes
                  if idx.nodes[i].name not in params]
        from .module import output_names_of

        names = output_names_of(graph)  # the names the module reports (and the manifest has)
        outputs = [{"name": n, "shape": _list(shapes[e]), "dtype": dtypes[e]}
                   for n, e in zip(names, idx.output_entries)]
        for key, actual in (("inputs", inputs), ("outputs", outputs)):
            if self.manifest[key] != actual:
                raise SerializationError(
                    f"{where}: the manifest's {key} do not match graph.json; expected "
                    f"{_brief(actual)}, got {_brief(self.manifest[key])}. The file was edited "
                    f"after export; re-export it")


def _brief(ios: list) -> str:
    return "[" + ", ".join(f"{d.get('name')}:{d.get('shape')}:{d.get('dtype')}"
                           for d in ios if isinstance(d, dict)) + "]"


def read_artifact(path: str) -> Artifact:
    """Open an artifact and verify its manifest digest and every member's sha256.

    Nothing but ``manifest.json`` is parsed here; graph and params are parsed on demand.

    Raises:
        SerializationError: not an artifact, corrupt, or modified after export.
    """
    where = f"artifact '{path}'"
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise SerializationError(f"{where}: file not found") from None
    except IsADirectoryError:
        raise SerializationError(f"{where}: is a directory, not an artifact file") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
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
        if zf.getinfo("manifest.json").file_size > MAX_MANIFEST_BYTES:
            raise SerializationError(f"{where}: manifest.json is larger than 16 MiB; refusing")
        try:
            manifest = json.loads(zf.read("manifest.json"))
        except (*_READ_ERRORS, UnicodeDecodeError, RecursionError) as exc:
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
            except _READ_ERRORS as exc:
                raise SerializationError(f"{where}: member '{name}' is corrupt ({exc})") from None
            if hashlib.sha256(data).hexdigest() != digest:
                raise SerializationError(f"{where}: member '{name}' fails its sha256 check; the "
                                         f"file was modified after export. Refusing to load it")
            members[name] = data
    for required in ("graph.json", "params.bin"):
        if required not in members:
            raise SerializationError(f"{where}: member '{required}' is missing")
    return Artifact(manifest, members, path)


def _check_manifest(m: Any, where: str) -> None:
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise SerializationError(f"{where}: manifest is not an NNVM artifact manifest")
    if m.get("format_version") != FORMAT_VERSION:
        raise SerializationError(f"{where}: format version {m.get('format_version')!r}; this "
                                 f"nnvm reads version {FORMAT_VERSION}. Re-export with this "
                                 f"version of nnvm")
    if m.get("manifest_sha256") != manifest_digest(m):
        raise SerializationError(f"{where}: manifest.json fails its sha256 check; the manifest "
                                 f"was edited after export. Refusing to load it")
    if not isinstance(m.get("target"), str) or not isinstance(m.get("members"), dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in m["members"].items()):
        raise SerializationError(f"{where}: manifest lacks a target or member hashes")
    for key in ("inputs", "outputs"):
        ios = m.get(key)
        if not isinstance(ios, list) or not all(
                isinstance(d, dict) and isinstance(d.get("name"), str)
                and (d.get("shape") is None or (isinstance(d["shape"], list) and all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0
                    for x in d["shape"])))
                and (d.get("dtype") is None or isinstance(d["dtype"], str)) for d in ios):
            raise SerializationError(f"{where}: manifest '{key}' must list "
                                     f"{{name, shape, dtype}} records")
