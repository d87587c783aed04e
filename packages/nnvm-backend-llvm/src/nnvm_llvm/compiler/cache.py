"""Kernel cache: scheduled kernels (in memory) and linked libraries (in memory and on disk).

Keys are structural: a group's key hashes its ops, attributes, wiring, input and output
shapes and dtypes, weight packing, the target and the schedule version (NNVM's
``GraphKey``), so identical groups in one model share one function, and a rebuild of the
same model, in this process or a later one, skips LLVM entirely (the linked library is
read back from disk).

The disk cache is native code that ``build`` loads, so it is never trusted blindly:

- every entry is one file, ``libs/<key>.entry``: a header (magic, key, sha256 and length of
  the payload) then the library. The sha256 covers key and payload and is checked before
  the bytes leave this module, so a truncated, emptied, garbage, or renamed/replaced entry is
  a miss: it is deleted, a ``CacheWarning`` says so, and the build rebuilds it;
- entries are written atomically (a private temp file, then ``os.replace``), so a crash
  mid-write never leaves a half entry under the real name;
- folders are created 0700 and tightened to 0700 when they are ours; a cache folder owned by
  another user, or that others can write, is not used at all (with a warning), because
  whoever can write it chooses the code ``build`` runs;
- scheduled kernels are kept in memory only. Earlier versions stored them as TVMScript and
  evaluated the text on load (``tvm.script.from_source`` runs Python attribute lookups on
  whatever the file says); TVM 0.27 cannot serialise TIRX functions to inert JSON
  (``save_json`` crashes), so that layer is dropped rather than kept unsafe;
- the disk cache is capped: ``NNVM_CACHE_MAX_BYTES`` (default 2 GiB); after each write the
  least recently used entries (by mtime, refreshed on every hit) are evicted until the
  total fits.

Disk layout under ``NNVM_CACHE_DIR`` (default ``~/.cache/nnvm/llvm``): ``libs/<key>.entry``
(kernel libraries, and the compiled ``threadpool.c`` object as ``threadpool-<hash>``; older
versions kept a bare ``threadpool-<hash>.o`` in the folder, which ``clear`` still removes).
``NNVM_CACHE_DIR=off`` (or ``0``/``none``/``false``) disables the disk cache, the rule every
package shares (``nnvm.cache_dirs``). ``nnvm cache info`` and ``nnvm cache clear`` show and
empty it. This module imports no TVM, so the CLI works with the runtime-only install.

The hash detects corruption and mistakes, not a same-user attacker: anyone who can write
the folder as you can also write a matching hash (see docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import tempfile
import threading
import warnings

from nnvm import cache_dirs
from nnvm.errors import NNVMError, format_error

ENTRY_MAGIC = b"NNVMLLC1"
_HEADER = struct.Struct("<8s32s32sQ")  # magic, sha256(key), sha256(key + payload), length
DEFAULT_MAX_BYTES = 2 << 30
ENTRY_SUFFIX = ".entry"


class CacheWarning(UserWarning):
    """A kernel-cache entry was unusable (and discarded) or the cache folder is unsafe."""


def _tvm_version() -> str:
    try:
        from importlib.metadata import version

        return version("apache-tvm")
    except Exception:  # noqa: BLE001 - an unusual install: fall back to the module itself
        try:
            import tvm

            return str(tvm.__version__)
        except ImportError:
            return "no-tvm"


def _source_version() -> str:
    """Hash of the compiler's own sources: editing a rule or a schedule invalidates keys."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith((".py", ".c")):
            with open(os.path.join(here, name), "rb") as f:
                h.update(name.encode() + f.read())
    h.update(_tvm_version().encode())
    return h.hexdigest()[:12]


SCHEDULE_VERSION = _source_version()

_lock = threading.Lock()
_kernels: dict[str, object] = {}
_libs: dict[str, bytes] = {}
counters = {"kernel_hits": 0, "kernel_misses": 0, "lib_hits": 0, "lib_misses": 0,
            "lib_discarded": 0, "lib_evicted": 0}
_warned_dirs: set[str] = set()


def configured_dir() -> str | None:
    """The cache folder the environment asks for (None when disabled); creates nothing.

    The shared rule of ``nnvm.cache_dirs``, with this backend's own layout: the folder
    ``NNVM_CACHE_DIR`` names is used itself (not a ``llvm/`` inside it), and the default is
    ``~/.cache/nnvm/llvm``."""
    return cache_dirs.cache_root(default=os.path.join(cache_dirs.default_root(), "llvm"))


def max_bytes() -> int:
    """The size cap of the disk cache: ``NNVM_CACHE_MAX_BYTES`` (bytes) or 2 GiB.

    Raises:
        NNVMError: the variable is set to something other than a non-negative integer.
    """
    raw = os.environ.get("NNVM_CACHE_MAX_BYTES", "")
    if raw == "":
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
        if value < 0:
            raise ValueError
    except ValueError:
        raise NNVMError(format_error("environment variable NNVM_CACHE_MAX_BYTES",
                                     "is not a size in bytes", "a non-negative integer",
                                     repr(raw), fix="e.g. NNVM_CACHE_MAX_BYTES=1073741824"))
    return value


def _warn_once(d: str, msg: str) -> None:
    if d not in _warned_dirs:
        _warned_dirs.add(d)
        warnings.warn(msg, CacheWarning, stacklevel=3)


def _private_dir(path: str, tighten: bool) -> bool:
    """Create ``path`` 0700; False when it is unsafe (another user's, or writable by others
    and not ours to fix). ``tighten`` chmods an existing folder of ours to 0700: done for
    ``libs/`` (it holds native code), never for the top folder, which may be any folder the
    user named (``NNVM_CACHE_DIR=/tmp``)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    loose = stat.S_IMODE(st.st_mode) & 0o022
    if not mine and (tighten or (loose and not st.st_mode & stat.S_ISVTX)):
        _warn_once(path, format_error(
            f"llvm kernel cache '{path}'", "is owned by another user; not using it",
            fix="Set NNVM_CACHE_DIR to a folder of your own"))
        return False
    if tighten and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return True


def cache_dir() -> str | None:
    """The disk cache folder (``libs/`` inside it 0700), or None when disabled or unsafe."""
    d = configured_dir()
    if d is None:
        return None
    try:
        if not (_private_dir(d, tighten=False)
                and _private_dir(os.path.join(d, "libs"), tighten=True)):
            return None
    except OSError:
        return None
    return d


def digest(text: str) -> str:
    return hashlib.sha256(f"v{SCHEDULE_VERSION}|{text}".encode()).hexdigest()[:24]


def _write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")  # 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _entry_path(d: str, key: str) -> str:
    return os.path.join(d, "libs", key + ENTRY_SUFFIX)


def encode_entry(key: str, payload: bytes) -> bytes:
    """The bytes of one entry file: header (magic, key hash, content hash, length), payload."""
    kh = hashlib.sha256(key.encode()).digest()
    ch = hashlib.sha256(kh + payload).digest()
    return _HEADER.pack(ENTRY_MAGIC, kh, ch, len(payload)) + payload


def decode_entry(key: str, blob: bytes) -> bytes:
    """The payload of an entry file for ``key``.

    Raises:
        ValueError: short, wrong magic, another key's entry, wrong length or wrong hash
            (the reason, for the warning).
    """
    if len(blob) < _HEADER.size:
        raise ValueError(f"truncated ({len(blob)} bytes, shorter than its header)")
    magic, kh, ch, length = _HEADER.unpack_from(blob)
    if magic != ENTRY_MAGIC:
        raise ValueError("not a cache entry (bad magic)")
    if kh != hashlib.sha256(key.encode()).digest():
        raise ValueError("it belongs to another key (copied or replaced)")
    payload = blob[_HEADER.size:]
    if len(payload) != length:
        raise ValueError(f"truncated or padded ({len(payload)} bytes, header says {length})")
    if hashlib.sha256(kh + payload).digest() != ch:
        raise ValueError("content hash mismatch (corrupt or replaced)")
    return payload


def get_kernel(key: str):
    """The scheduled PrimFunc for ``key`` from this process's memory, or None."""
    with _lock:
        if key in _kernels:
            counters["kernel_hits"] += 1
            return _kernels[key]
        counters["kernel_misses"] += 1
    return None


def put_kernel(key: str, func) -> None:
    with _lock:
        _kernels[key] = func


def get_lib(key: str) -> bytes | None:
    """The linked library for ``key`` (verified) or None; a bad entry is deleted, warned
    about, and reported as a miss so that the caller rebuilds it."""
    with _lock:
        if key in _libs:
            counters["lib_hits"] += 1
            return _libs[key]
    d = cache_dir()
    if d is not None:
        path = _entry_path(d, key)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except OSError:
            blob = None
        if blob is not None:
            try:
                data = decode_entry(key, blob)
            except ValueError as exc:
                _discard(path, str(exc))
            else:
                try:
                    os.utime(path)  # least recently used = oldest mtime
                except OSError:
                    pass
                with _lock:
                    _libs[key] = data
                    counters["lib_hits"] += 1
                return data
    with _lock:
        counters["lib_misses"] += 1
    return None


def _discard(path: str, reason: str) -> None:
    with _lock:
        counters["lib_discarded"] += 1
    try:
        os.unlink(path)
    except OSError:
        pass
    warnings.warn(format_error(f"llvm kernel cache entry '{path}'", f"is unusable: {reason}",
                               fix="Discarded; the library is rebuilt now"),
                  CacheWarning, stacklevel=3)


def put_lib(key: str, data: bytes) -> None:
    with _lock:
        _libs[key] = data
    d = cache_dir()
    if d is not None:
        try:
            _write_atomic(_entry_path(d, key), encode_entry(key, data))
            evict(d, keep=key)
        except (OSError, NNVMError):
            pass  # the disk cache is best effort; the build already has its library


def _entries(d: str) -> list[tuple[float, int, str]]:
    out = []
    libs = os.path.join(d, "libs")
    try:
        names = os.listdir(libs)
    except OSError:
        return out
    for name in names:
        if not name.endswith(ENTRY_SUFFIX):
            continue
        path = os.path.join(libs, name)
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((st.st_mtime, st.st_size, path))
    return out


def evict(d: str, keep: str | None = None) -> int:
    """Delete least recently used entries until the cache fits ``max_bytes()``; returns how
    many were deleted (never the entry ``keep`` just written)."""
    limit = max_bytes()
    entries = sorted(_entries(d))
    total = sum(s for _, s, _ in entries)
    removed = 0
    keep_path = _entry_path(d, keep) if keep else None
    for _, size, path in entries:
        if total <= limit:
            break
        if path == keep_path:
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        removed += 1
    with _lock:
        counters["lib_evicted"] += removed
    return removed


def _own_files(d: str) -> list[str]:
    """Files this cache wrote (and older versions of it), never anything else in ``d``:
    ``NNVM_CACHE_DIR`` may name a folder that holds other things."""
    out = []
    for sub, ok in (("libs", (ENTRY_SUFFIX, ".so")), ("kernels", (".py",)),
                    ("runtime", (ENTRY_SUFFIX,)), ("", (".o",))):
        folder = os.path.join(d, sub) if sub else d
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            if (name.startswith(".tmp-") or (name.endswith(ok) and
                                             (sub or name.startswith("threadpool-")))) \
                    and os.path.isfile(path) and not os.path.islink(path):
                out.append(path)
    return out


def info() -> dict:
    """What ``nnvm cache info`` prints: folder, entry count and bytes, cap, other files
    (threadpool objects, the C executor in ``runtime/``, leftovers of older versions)."""
    d = configured_dir()
    out = {"dir": d, "enabled": d is not None, "max_bytes": max_bytes(), "entries": 0,
           "bytes": 0, "other_files": 0, "other_bytes": 0}
    if d is None or not os.path.isdir(d):
        return out
    entries = _entries(d)
    out["entries"], out["bytes"] = len(entries), sum(s for _, s, _ in entries)
    entry_paths = {p for _, _, p in entries}
    for path in _own_files(d):
        if path in entry_paths:
            continue
        try:
            out["other_bytes"] += os.path.getsize(path)
            out["other_files"] += 1
        except OSError:
            pass
    return out


def clear() -> int:
    """Delete the files this cache wrote (entries, threadpool objects, the C executor, an older version's
    ``kernels/*.py`` and ``libs/*.so``) and the in-memory entries; returns the count."""
    clear_memory()
    d = configured_dir()
    if d is None or not os.path.isdir(d):
        return 0
    removed = 0
    for path in _own_files(d):
        try:
            os.unlink(path)
            removed += 1
        except OSError:
            pass
    for sub in ("kernels", "libs", "runtime"):
        try:
            os.rmdir(os.path.join(d, sub))  # only when empty
        except OSError:
            pass
    return removed


def clear_memory() -> None:
    """Forget the in-memory entries (the disk cache stays)."""
    with _lock:
        _kernels.clear()
        _libs.clear()
