"""The one-file ``.nnvm`` artifact: a zip of manifest, graph JSON, params and backend members.

``manifest.json`` records the format version, the nnvm and plugin versions, the plugins that
provided the graph's ops and the target (``providers``: loading activates just those), the
target, the inputs and outputs, the sha256 and the size of every member (``members``, ``member_sizes``)
and its own sha256 (``manifest_sha256``, over the canonical JSON of the other fields).

Loading is bounded before it is trusted. A zip can claim anything, and a few KB of bzip2 or
deflate can inflate to gigabytes, so ``read_artifact``:

1. refuses, from the zip directory alone, too many members, compression methods other than
   stored and deflate, encrypted members, a total size above ``NNVM_ARTIFACT_MAX_BYTES``
   (default 8 GiB) and any member larger than 1 MiB that claims to inflate more than
   ``NNVM_ARTIFACT_MAX_RATIO`` times (default 100) its compressed size;
2. reads the manifest with a 16 MiB cap, checks its digest and, when it lists sizes, that
   no member's size in the zip directory exceeds the one recorded at export (the manifest's
   size is the most a member may inflate to; the sha256 then decides);
3. streams every member in 1 MiB chunks through sha256, stopping as soon as it yields more
   bytes than declared, and keeps its bytes only once the whole member hashed right.

Artifacts written before ``member_sizes`` existed still load: their members are bounded by the
zip directory's declared size and the same ratio limit. ``write_artifact`` stores a member
uncompressed when deflate would exceed the ratio limit (a large all-zero weight), so that
every artifact it writes loads under the default limits.

The hashes detect corruption and edits, not forgery: whoever can rewrite the file can rewrite
the hashes. A backend member such as ``lib.so`` is native code: load only artifacts you trust,
or set a trust policy so that only files signed by known keys load (``nnvm.runtime.signing``:
the signature member ``manifest.sig`` is checked right after the manifest, before anything
else is read).
Members are validated before use: ``check_consistency`` checks the graph's declared shapes
and every param's shape and dtype against the graph; backends parse their own JSON members
through ``Artifact.json_member`` with a schema (``nnvm.serialization.schema``).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import tempfile
import zipfile
import zlib
from typing import Any

from ..errors import NNVMError, SerializationError, format_error

FORMAT = "nnvm-artifact"
FORMAT_VERSION = 1
#: default cap on the sum of the members' inflated sizes (``NNVM_ARTIFACT_MAX_BYTES``)
MAX_TOTAL_BYTES = 8 << 30
#: default cap on a member's inflated / compressed size (``NNVM_ARTIFACT_MAX_RATIO``)
MAX_RATIO = 100
#: members up to this size are not ratio-checked: small JSON compresses very well, and the
#: most such a member can cost is this many bytes
RATIO_FLOOR = 1 << 20
MAX_MANIFEST_BYTES = 16 << 20
MAX_MEMBERS = 64
#: cap on any one entry's declared element count in graph.json (2**40: 4 TiB of float32)
MAX_ENTRY_ELEMENTS = 1 << 40
_CHUNK = 1 << 20
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, RuntimeError,
                NotImplementedError, MemoryError)


def _env_limit(name: str, default: int) -> int:
    """A positive integer limit from the environment (so a deployment can raise it)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
        if value <= 0:
            raise ValueError
    except ValueError:
        raise SerializationError(format_error(
            f"environment variable {name}", "is not a positive integer", "e.g. "
            f"{default}", repr(raw), fix=f"Unset it or set a positive number")) from None
    return value


def limits() -> dict[str, int]:
    """The limits in force: ``max_total_bytes`` and ``max_ratio`` (environment or default)."""
    return {"max_total_bytes": _env_limit("NNVM_ARTIFACT_MAX_BYTES", MAX_TOTAL_BYTES),
            "max_ratio": _env_limit("NNVM_ARTIFACT_MAX_RATIO", MAX_RATIO),
            "ratio_floor": RATIO_FLOOR, "max_members": MAX_MEMBERS,
            "max_manifest_bytes": MAX_MANIFEST_BYTES}


def manifest_digest(manifest: dict) -> str:
    """sha256 of the canonical JSON of ``manifest`` without its ``manifest_sha256`` field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


#: member holding the constants of control-flow bodies, keyed ``<path>|<name>`` where the
#: path is ``node id/subgraph index`` per nesting level, e.g. ``12/0|weight``
SUBGRAPH_PARAMS = "subgraph_params.bin"


def _subgraphs(graph, prefix: str = ""):
    """``(path, subgraph)`` for every control-flow body, nested ones included."""
    for nid, node in enumerate(graph.index.nodes):
        for k, sub in enumerate(node.subgraphs):
            path = f"{prefix}{nid}/{k}"
            yield path, node, k, sub
            yield from _subgraphs(sub, path + "/")


def _op_names(graph) -> set[str]:
    """The names of the ops of ``graph`` and of its control-flow bodies."""
    graphs = [graph] + [sub for _, _, _, sub in _subgraphs(graph)]
    return {node.op.name for g in graphs for node in g.index.nodes if node.op is not None}


def subgraph_params(graph) -> dict:
    """The constants every control-flow body carries in its ``params`` attribute, flattened
    to one param dict (``<path>|<name>``). Why: a body's weights live on the body, not in the
    module's params, and graph JSON keeps no arrays; an export without them loaded a model
    whose If branch had lost its weights."""
    out = {}
    for path, _, _, sub in _subgraphs(graph):
        for name, value in (sub.attrs.get("params") or {}).items():
            out[f"{path}|{name}"] = value
    return out


def attach_subgraph_params(graph, flat: dict, where: str) -> None:
    """Put ``subgraph_params`` back on the bodies of a freshly parsed ``graph``."""
    by_path: dict[str, dict] = {}
    for key, value in flat.items():
        path, sep, name = key.partition("|")
        if not sep or not name:
            raise SerializationError(format_error(f"{where}, key {key!r}", "is not "
                                                  "'<path>|<name>'", fix="Re-export the model"))
        by_path.setdefault(path, {})[name] = value
    found = {path: (node, k, sub) for path, node, k, sub in _subgraphs(graph)}
    for path, params in by_path.items():
        if path not in found:
            raise SerializationError(format_error(
                f"{where}, key '{path}|...'", "names no control-flow body of graph.json",
                fix="Re-export the model"))
        node, k, sub = found[path]
        node.subgraphs[k] = sub.with_attrs(params=params)


def write_artifact(path: str, module, sign_key: Any = None) -> None:
    """Export ``module`` (a ``nnvm.runtime.Module``) to ``path`` (written atomically);
    ``sign_key`` (a private key file, see ``nnvm.runtime.signing``) adds a signature."""
    from .. import __version__
    from .. import plugin_manager as plugins
    from ..serialization.param_dict import save_param_dict

    members: dict[str, bytes] = {"graph.json": module.graph.json().encode("utf-8"),
                                 "params.bin": save_param_dict(module.params)}
    sub_params = subgraph_params(module.graph)
    if sub_params:  # constants of If/Loop/Scan bodies (graph JSON keeps no arrays)
        members[SUBGRAPH_PARAMS] = save_param_dict(sub_params)
    for name, data in module._artifact_members().items():
        if name in members or name == "manifest.json" or not _plain_name(name):
            raise SerializationError(f"export: backend member name {name!r} is reserved or "
                                     f"not a plain file name")
        members[name] = bytes(data)
    if len(members) + 1 > MAX_MEMBERS:
        raise SerializationError(format_error("export", "too many members", f"at most "
                                              f"{MAX_MEMBERS}", len(members) + 1))
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "nnvm_version": __version__,
        "plugins": {p.name: p.version for p in plugins.plugins()},
        "providers": plugins.providers_of(_op_names(module.graph), str(module.target)),
        "target": module.target,
        "inputs": [{"name": n, "shape": _list(module.input_shapes.get(n)),
                    "dtype": module.input_dtypes.get(n)} for n in module.input_names],
        "outputs": [{"name": n, "shape": _list(s), "dtype": d} for n, s, d in
                    zip(module.output_names, module.output_shapes, module.output_dtypes)],
        "members": {n: hashlib.sha256(b).hexdigest() for n, b in members.items()},
        "member_sizes": {n: len(b) for n, b in members.items()},
    }
    manifest["manifest_sha256"] = manifest_digest(manifest)
    _write_entries(path, manifest, members, sign_key)


def sign_artifact(path: str, sign_key: Any, out: str | None = None) -> str:
    """Add (or replace) the signature of the artifact at ``path``; write it to ``out``
    (default: in place, atomically). Returns the signer's key id. The file is verified
    (hashes, limits) before it is signed: nobody signs a file that does not load."""
    from .signing import load_private_key, key_id

    key = load_private_key(sign_key)
    artifact = read_artifact(path, trusted_keys=())
    _write_entries(out or path, artifact.manifest, artifact.members, key)
    return key_id(key.public_key())


def _write_entries(path: str, manifest: dict, members: dict[str, bytes],
                   sign_key: Any = None) -> None:
    entries = [("manifest.json", json.dumps(manifest, indent=1).encode())] + \
        sorted(members.items())
    if sign_key is not None:
        from .signing import SIGNATURE_MEMBER, signature_record

        entries.insert(1, (SIGNATURE_MEMBER, signature_record(manifest, sign_key)))
    stored: set[str] = set()
    data = _zip_bytes(entries, stored)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:  # keep every member loadable by default
        stored = {i.filename for i in zf.infolist() if _ratio_exceeded(i, MAX_RATIO // 2)}
    if stored:
        data = _zip_bytes(entries, stored)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".nnvm-export-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # a crash mid-write never leaves a half-written artifact
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _zip_bytes(entries: list[tuple[str, bytes]], stored: set[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.compress_type = zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return buf.getvalue()


def _ratio_exceeded(info: zipfile.ZipInfo, max_ratio: int) -> bool:
    return info.file_size > RATIO_FLOOR and \
        info.file_size > max_ratio * max(info.compress_size, 1)


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 255 and "/" not in name and \
        "\\" not in name and "\x00" not in name and not name.startswith(".")


def _list(shape) -> list | None:
    return None if shape is None else list(shape)


class Artifact:
    """A verified artifact: ``manifest``, raw ``members`` and lazily parsed graph/params.

    Every byte in ``members`` has passed its sha256 check; nothing in it has been validated
    yet. Use ``graph()``, ``params`` and ``json_member`` rather than parsing members by hand:
    they turn any malformed content into a ``SerializationError`` naming member and field.
    """

    def __init__(self, manifest: dict, members: dict[str, bytes], path: str = "<memory>",
                 signer: str | None = None):
        self.manifest = manifest
        self.members = members
        self.path = path
        #: key id of the verified signer when a trust policy was enforced, else None
        self.signer = signer
        self._graph = None
        self._params: dict | None = None

    @property
    def target(self) -> str:
        return self.manifest["target"]

    def _where(self, member: str) -> str:
        return f"artifact '{self.path}', member '{member}'"

    def graph(self):
        """The graph (parsed once from ``graph.json``; the hashes were checked already)."""
        if self._graph is None:
            from ..serialization.graph_json import load_json

            graph = _as_serialization_error(
                self._where("graph.json"), lambda: load_json(self.members["graph.json"]))
            if SUBGRAPH_PARAMS in self.members:
                from ..serialization.param_dict import load_param_dict

                where = self._where(SUBGRAPH_PARAMS)
                flat = _as_serialization_error(
                    where, lambda: load_param_dict(self.members[SUBGRAPH_PARAMS]))
                attach_subgraph_params(graph, flat, where)
            self._graph = graph
        return self._graph

    @property
    def params(self) -> dict:
        if self._params is None:
            from ..serialization.param_dict import load_param_dict

            self._params = _as_serialization_error(
                self._where("params.bin"), lambda: load_param_dict(self.members["params.bin"]))
        return self._params

    def json_member(self, name: str, schema: Any = None) -> Any:
        """Parse the JSON member ``name`` with depth and size limits and, given a ``schema``
        (see ``nnvm.serialization.schema``), validate it before anyone indexes into it.

        Raises:
            SerializationError: the member is missing, not JSON, nested too deep, or does
                not match the schema; the message names the member and the field.
        """
        from ..serialization.schema import load_json_bytes, validate

        where = self._where(name)
        if name not in self.members:
            raise SerializationError(format_error(
                where, "is missing", fix=f"Re-export the model with target "
                f"{self.manifest.get('target')!r}"))
        obj = load_json_bytes(self.members[name], where)
        if schema is not None:
            validate(obj, schema, where)
        return obj

    def check_consistency(self) -> None:
        """Parse graph and params and check them against each other and the manifest.

        Every shape the graph declares must be a list of non-negative ints with at most
        2**40 elements, and every param must have exactly the shape and dtype the graph
        declares for that input: a runtime would otherwise broadcast or cast it silently.

        Raises:
            SerializationError: the manifest describes another graph than the one inside,
                or a param does not fit the graph.
        """
        where = f"artifact '{self.path}'"
        graph, params = self.graph(), self.params
        idx = graph.index
        shapes = graph.attrs.get("shape") or [None] * idx.num_node_entries
        dtypes = graph.attrs.get("dtype") or [None] * idx.num_node_entries
        gwhere = self._where("graph.json")
        for e, shape in enumerate(shapes):
            _check_declared_shape(shape, f"{gwhere}, attrs.shape[{e}]")
        unknown = sorted(set(params) - set(idx.input_names))
        if unknown:
            raise SerializationError(f"{where}: params.bin holds {unknown}, which are not "
                                     f"inputs of graph.json")
        rptr = idx.entry_rptr
        pwhere = self._where("params.bin")
        for nid in idx.input_nodes:
            name = idx.nodes[nid].name
            if name not in params:
                continue
            value, shape, dtype = params[name], shapes[rptr[nid]], dtypes[rptr[nid]]
            if shape is not None and tuple(value.shape) != tuple(shape):
                raise SerializationError(format_error(
                    f"{pwhere}, param '{name}'", "has a shape other than graph.json declares",
                    tuple(shape), tuple(value.shape),
                    fix="The file was edited after export or built from mismatched "
                        "params; re-export it"))
            if dtype is not None and str(value.dtype) != dtype:
                raise SerializationError(format_error(
                    f"{pwhere}, param '{name}'", "has a dtype other than graph.json declares",
                    dtype, str(value.dtype), fix="Re-export the model"))
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


def _as_serialization_error(where: str, parse):
    """Run a parser; anything it raises that is not already an NNVMError (a hostile file
    can reach corners a parser did not foresee) becomes a SerializationError at ``where``."""
    try:
        return parse()
    except SerializationError as exc:
        if where in str(exc):
            raise
        raise SerializationError(f"{where}: {exc}") from None
    except NNVMError as exc:
        raise SerializationError(f"{where}: {exc}") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            RecursionError, MemoryError, UnicodeError) as exc:
        raise SerializationError(format_error(
            where, f"is malformed ({type(exc).__name__}: {str(exc)[:200]})",
            fix="Re-export the model")) from None


def _check_declared_shape(shape: Any, where: str) -> None:
    if shape is None:
        return
    if not isinstance(shape, (list, tuple)) or len(shape) > 32 or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise SerializationError(format_error(where, "is not a shape", "at most 32 "
                                              "non-negative ints", repr(shape)[:120]))
    if math.prod(shape) > MAX_ENTRY_ELEMENTS:
        raise SerializationError(format_error(
            where, "declares too many elements", f"at most 2**40", math.prod(shape),
            fix="The graph was edited or is not meant for this runtime"))


def _brief(ios: list) -> str:
    return "[" + ", ".join(f"{d.get('name')}:{d.get('shape')}:{d.get('dtype')}"
                           for d in ios if isinstance(d, dict)) + "]"


def read_artifact(path: str, trusted_keys: Any = None) -> Artifact:
    """Open an artifact, check its limits, and verify its manifest and every member's sha256.

    Memory is bounded by the sizes the manifest declares (the zip directory's for older
    artifacts) and the ratio limit, never by what a member actually inflates to; nothing but
    ``manifest.json`` is parsed here; graph and params are parsed on demand.

    ``trusted_keys`` sets a trust policy (public key files or objects; ``()`` for none even
    when ``NNVM_TRUSTED_KEYS`` is set; None reads that variable): with a policy, the
    manifest's signature is checked right after the manifest is read, before any other
    member (``nnvm.runtime.signing``).

    Raises:
        SerializationError: not an artifact, over a limit, corrupt, or modified after export.
        SignatureError: under a trust policy, unsigned, wrongly signed or by another key.
    """
    where = f"artifact '{path}'"
    lim = limits()
    policy = None
    if trusted_keys is None or (not isinstance(trusted_keys, (list, tuple, set, frozenset))
                                or len(trusted_keys)):
        from .signing import trust_policy

        policy = trust_policy(trusted_keys)
    signer = None
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise SerializationError(f"{where}: file not found") from None
    except IsADirectoryError:
        raise SerializationError(f"{where}: is a directory, not an artifact file") from None
    except OSError as exc:
        raise SerializationError(f"{where}: cannot be read ({exc})") from None
    with f:
        try:
            zf = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError,
                MemoryError) as exc:
            raise SerializationError(f"{where}: not an NNVM artifact (not a zip file: {exc})"
                                     ) from None
        with zf:
            infos = _check_directory(zf, where, lim, os.fstat(f.fileno()).st_size)
            manifest = _read_manifest(zf, infos, where, lim)
            if policy is not None:
                signer = _check_signature(zf, infos, manifest, policy, where)
            members = {name: _read_member(zf, infos[name], digest,
                                          manifest.get("member_sizes", {}).get(name), where)
                       for name, digest in manifest["members"].items()}
    for required in ("graph.json", "params.bin"):
        if required not in members:
            raise SerializationError(f"{where}: member '{required}' is missing")
    _activate_providers(manifest)
    return Artifact(manifest, members, path, signer)


def _activate_providers(manifest: dict) -> None:
    """Activate the plugins that provided the artifact's ops and target (core always), so
    that loading it imports no other plugin package; an artifact written before the manifest
    recorded them (no ``providers``) loads every plugin, as it did then."""
    from .. import plugin_manager as plugins

    if "providers" in manifest:
        plugins.activate(manifest["providers"])
    else:
        plugins.load()


def _check_signature(zf: zipfile.ZipFile, infos: dict, manifest: dict, policy: dict,
                     where: str) -> str:
    from .signing import SIGNATURE_MEMBER, verify

    info = infos.get(SIGNATURE_MEMBER)
    record = None
    if info is not None:
        if info.file_size > 4096:
            raise SerializationError(format_error(
                f"{where}, member '{SIGNATURE_MEMBER}'", "is too large for a signature",
                "at most 4096 bytes", info.file_size, fix="Re-sign the file"))
        record = _stream(zf, info, info.file_size, None,
                         f"{where}, member '{SIGNATURE_MEMBER}'")
    return verify(manifest, record, policy, where)


def _check_directory(zf: zipfile.ZipFile, where: str, lim: dict,
                     archive_size: int) -> dict[str, zipfile.ZipInfo]:
    """Limits that the zip directory alone decides, before one byte is inflated.

    Compressed sizes must fit in the file, separately and together (no overlapping members),
    so the ratio limit bounds what the whole file can inflate to: at most
    ``max_ratio x file size`` plus 1 MiB per member.
    """
    infos = zf.infolist()
    if len(infos) > lim["max_members"]:
        raise SerializationError(format_error(where, "has too many members", f"at most "
                                              f"{lim['max_members']}", len(infos)))
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise SerializationError(f"{where}: duplicate member names; the file was tampered "
                                 f"with")
    total = packed = 0
    for i in infos:
        mwhere = f"{where}, member '{i.filename}'"
        if i.compress_type not in _METHODS:
            raise SerializationError(format_error(
                mwhere, "uses an unsupported compression method", "stored or deflate",
                f"method {i.compress_type}", fix="nnvm writes only these; re-export the file"))
        if i.flag_bits & 0x1:
            raise SerializationError(format_error(mwhere, "is encrypted",
                                                  fix="Re-export the file"))
        if _ratio_exceeded(i, lim["max_ratio"]):
            raise SerializationError(format_error(
                mwhere, "claims to inflate too far; refusing a possible zip bomb",
                f"at most {lim['max_ratio']}x its compressed size",
                f"{i.file_size} bytes from {i.compress_size}",
                fix="Raise NNVM_ARTIFACT_MAX_RATIO only for a file you trust"))
        if i.header_offset + i.compress_size > archive_size:
            raise SerializationError(format_error(
                mwhere, "claims more compressed bytes than the file holds",
                f"at most {archive_size - i.header_offset}", i.compress_size,
                fix="The file is truncated or hostile"))
        total += i.file_size
        packed += i.compress_size
    if packed > archive_size:
        raise SerializationError(format_error(
            where, "members overlap (their compressed sizes add up to more than the file)",
            f"at most {archive_size} bytes", packed, fix="The file is hostile or corrupt"))
    if total > lim["max_total_bytes"]:
        raise SerializationError(format_error(
            where, "members expand to too many bytes; refusing",
            f"at most {lim['max_total_bytes']}", total,
            fix="Raise NNVM_ARTIFACT_MAX_BYTES for a file you trust"))
    if "manifest.json" not in names:
        raise SerializationError(f"{where}: no manifest.json; not an NNVM artifact")
    return {i.filename: i for i in infos}


def _read_manifest(zf: zipfile.ZipFile, infos: dict, where: str, lim: dict) -> dict:
    info = infos["manifest.json"]
    if info.file_size > lim["max_manifest_bytes"]:
        raise SerializationError(f"{where}: manifest.json is larger than 16 MiB; refusing")
    data = _stream(zf, info, info.file_size, None, f"{where}, member 'manifest.json'")
    try:
        manifest = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SerializationError(f"{where}: manifest.json unreadable ({exc})") from None
    _check_manifest(manifest, where)
    listed = manifest["members"]
    extra = sorted(set(infos) - set(listed) - {"manifest.json", "manifest.sig"})
    if extra:
        raise SerializationError(f"{where}: members not listed in the manifest: {extra}; "
                                 f"refusing a tampered file")
    for name in listed:
        if name not in infos:
            raise SerializationError(f"{where}: member '{name}' is missing")
    return manifest


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, digest: str,
                 declared: int | None, where: str) -> bytes:
    mwhere = f"{where}, member '{info.filename}'"
    if declared is not None and info.file_size > declared:
        # the manifest's size is the most this member may inflate to: refuse a bigger claim
        # without inflating a byte (it cannot hash right anyway)
        raise SerializationError(
            f"{where}: member '{info.filename}' fails its sha256 check (it claims "
            f"{info.file_size} bytes; the manifest records {declared}); the file was "
            f"modified after export. Refusing to load it")
    data = _stream(zf, info, info.file_size, digest, mwhere)
    return data


def _stream(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, digest: str | None,
            where: str) -> bytes:
    """Inflate one member in chunks, hashing as it goes and stopping past ``limit`` bytes;
    its bytes are returned only when the size and (given ``digest``) the sha256 match."""
    h = hashlib.sha256()
    chunks: list[bytes] = []
    got = 0
    try:
        with zf.open(info) as src:
            while True:
                chunk = src.read(min(_CHUNK, limit - got + 1))
                if not chunk:
                    break
                got += len(chunk)
                if got > limit:
                    raise SerializationError(format_error(
                        where, "inflates past its declared size; refusing", limit,
                        f"more than {limit}", fix="The file is corrupt or hostile"))
                h.update(chunk)
                chunks.append(chunk)
    except SerializationError:
        raise
    except _READ_ERRORS as exc:
        raise SerializationError(f"{where}: is corrupt ({exc})") from None
    if got != limit:
        raise SerializationError(format_error(where, "is shorter than declared", limit, got,
                                              fix="The file is corrupt; re-export it"))
    if digest is not None and h.hexdigest() != digest:
        name = info.filename
        raise SerializationError(f"{where.rsplit(', member', 1)[0]}: member '{name}' fails "
                                 f"its sha256 check; the file was modified after export. "
                                 f"Refusing to load it")
    return b"".join(chunks)


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
            not all(_plain_name(k) and isinstance(v, str) and len(v) == 64
                    for k, v in m["members"].items()):
        raise SerializationError(f"{where}: manifest lacks a target or member hashes")
    if "member_sizes" in m:
        sizes = m["member_sizes"]
        if not isinstance(sizes, dict) or set(sizes) != set(m["members"]) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for v in sizes.values()):
            raise SerializationError(format_error(
                f"{where}, member 'manifest.json'", "field 'member_sizes' is malformed",
                "a non-negative int for every member", repr(sizes)[:120]))
    providers = m.get("providers", [])
    if not isinstance(providers, list) or not all(isinstance(p, str) for p in providers):
        raise SerializationError(format_error(
            f"{where}, member 'manifest.json'", "field 'providers' is malformed",
            "a list of plugin names", repr(providers)[:120], fix="Re-export the model"))
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
