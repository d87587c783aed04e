"""OpenCL drivers installed from PyPI, registered for this process without touching ``/etc``.

Why: the ICD loader finds drivers through ``*.icd`` files in ``/etc/OpenCL/vendors`` (and, in
pyopencl's wheels, its bundled PoCL next to the loader). A driver that arrives as a wheel,
such as Intel's CPU runtime (``pip install nnvm-backend-opencl[intel]``: ``intel-opencl-rt``
puts ``libintelocl.so`` in the environment's ``lib/``), has no ICD file where the loader
looks, and a user should not have to write one or set variables. PoCL alone is not enough:
its bundled LLVM passes ``-target-cpu generic`` on CPUs newer than itself and then cannot
compile any kernel there, while Intel's runtime works on any x86-64 CPU, Intel or AMD.

How: before the first OpenCL call of the process, write a private vendors folder holding an
ICD file (absolute library path) for every driver the loader would have found by itself, plus
each wheel-installed driver, and point ``OCL_ICD_VENDORS`` at it. Nothing is done when the
user set ``OCL_ICD_VENDORS`` (their choice wins) or when ``NNVM_OPENCL_NO_WHEEL_DRIVERS=1``.
"""

from __future__ import annotations

import glob
import hashlib
import os
import tempfile

#: marks OCL_ICD_VENDORS as set by us (so a child process does not mistake it for the user's)
OURS = "NNVM_OPENCL_ICD_DIR"
SYSTEM_VENDORS = "/etc/OpenCL/vendors"


def intel_cpu_runtime() -> str | None:
    """Absolute path of the wheel-installed Intel CPU runtime (``libintelocl.so``), or None."""
    try:
        from importlib import metadata

        dist = metadata.distribution("intel-opencl-rt")
    except Exception:  # not installed, or broken metadata
        return None
    for f in dist.files or ():
        if os.path.basename(str(f)) == "libintelocl.so":
            path = os.path.realpath(str(dist.locate_file(f)))
            if os.path.isfile(path):
                return path
    return None


def wheel_drivers() -> dict[str, str]:
    """{name: library path} of the OpenCL drivers installed as wheels."""
    found = {}
    intel = intel_cpu_runtime()
    if intel:
        found["intel-cpu"] = intel
    return found


def _default_icds() -> dict[str, str]:
    """{file name: library} of the ICD files that ``OCL_ICD_VENDORS`` would hide: the system
    vendors folder (``OPENCL_VENDOR_PATH`` overrides it). pyopencl's wheels add the PoCL
    bundled beside their loader whatever the variable says, so it is not copied (it would be
    listed twice)."""
    folder = os.environ.get("OPENCL_VENDOR_PATH") or SYSTEM_VENDORS
    icds = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.icd"))):
        try:
            with open(path, encoding="utf-8") as f:
                lib = f.read().strip()
        except OSError:
            continue
        local = os.path.join(folder, lib)
        if lib and not os.path.isabs(lib) and os.path.exists(local):
            lib = local  # a bare name the loader would resolve beside the ICD file
        if lib:
            icds[os.path.basename(path)] = lib
    return icds


def register() -> str | None:
    """Make the wheel-installed drivers visible to the ICD loader of this process (and of
    the processes it starts). Returns the vendors folder used, or None when nothing was done.
    Must run before the process's first OpenCL call; later calls are no-ops."""
    if os.environ.get("NNVM_OPENCL_NO_WHEEL_DRIVERS") == "1":
        return None
    current = os.environ.get("OCL_ICD_VENDORS")
    if current and current != os.environ.get(OURS):
        return None  # the user chose the drivers
    if current:
        return current
    extra = wheel_drivers()
    if not extra:
        return None
    icds = _default_icds()
    icds.update({f"nnvm-{name}.icd": lib for name, lib in extra.items()})
    text = "".join(f"{name}\0{lib}\n" for name, lib in sorted(icds.items()))
    folder = _write_folder(icds, hashlib.sha256(text.encode()).hexdigest()[:16])
    if folder is None:
        return None
    os.environ["OCL_ICD_VENDORS"] = folder
    os.environ[OURS] = folder
    return folder


def _write_folder(icds: dict[str, str], digest: str) -> str | None:
    """The vendors folder holding ``icds``: ``<opencl cache>/icd/<digest>``, else (no cache
    under ``NNVM_CACHE_DIR=off``, or it cannot be written) ``<tmp>/nnvm-icd-<uid>/<digest>``,
    else a fresh ``mkdtemp`` folder. A folder is used only when it is ours and nobody else can
    write it: an ICD file names a library the loader loads into this process."""
    from .program import cache_dir

    cache = cache_dir()
    bases = [] if cache is None else [os.path.join(cache, "icd")]
    bases.append(os.path.join(tempfile.gettempdir(), f"nnvm-icd-{os.getuid()}"))
    for base in bases:
        folder = os.path.join(base, digest)
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
            if not _private(base):
                continue
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if not _private(folder):
                continue
            _fill(folder, icds)
            return folder
        except OSError:
            continue
    try:  # last resort, e.g. another user squats <tmp>/nnvm-icd-<uid>: a folder of our own
        folder = tempfile.mkdtemp(prefix="nnvm-icd-")
        _fill(folder, icds)
        return folder
    except OSError:
        return None


def _private(path: str) -> bool:
    """Whether ``path`` is a folder owned by this user that no one else can write."""
    st = os.lstat(path)
    return (os.path.isdir(path) and not os.path.islink(path) and st.st_uid == os.getuid()
            and not st.st_mode & 0o022)


def _fill(folder: str, icds: dict[str, str]) -> None:
    """Write each ICD file into ``folder`` atomically (a file already there is kept: the
    folder's name is the digest of its whole content)."""
    for name, lib in icds.items():
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".icd-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(lib + "\n")
            os.replace(tmp, path)
