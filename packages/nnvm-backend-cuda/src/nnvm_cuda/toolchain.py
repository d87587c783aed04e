"""Compile a model's CUDA C to PTX, once per architecture, with an on-disk cache.

Two compilers, tried in this order unless the target says otherwise (``-compiler=``):

* ``nvcc -ptx`` (found on PATH, in ``$CUDA_HOME/bin`` or ``$CUDA_PATH/bin``): needs no GPU
  and no driver, so a build machine without a GPU still produces every kernel's PTX;
* NVRTC through CuPy (``cupy.cuda.compiler.compile_using_nvrtc``): needs the NVRTC library
  CuPy links, not a device.

Cache: ``$NNVM_CACHE_DIR/cuda`` or ``~/.cache/nnvm/cuda`` (none under ``NNVM_CACHE_DIR=off``,
the rule of ``nnvm.cache_dirs``); the key hashes the source, the architecture, the options
and the compiler's identity (nvcc's version line or NVRTC's version), so a compiler upgrade
never reuses stale PTX. ``ptxas`` (when installed) assembles PTX to check it, which is how
the test suite verifies kernels on a machine without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

from nnvm_codegen_c.diagnostics import clip_log, kernels_at_lines
from nnvm import cache_dirs
from nnvm.errors import NNVMError

#: options given to every compile (no fast-math: results must match the reference kernels).
NVCC_OPTIONS = ("-std=c++17", "-lineinfo", "-diag-suppress=177")
NVRTC_OPTIONS = ("-std=c++17", "-lineinfo")
DEFAULT_ARCH = "sm_80"
_ARCH_RE = re.compile(r"^(?:sm|compute)_(\d{2,3})[a-z]?$")


class KernelBuildError(NNVMError):
    """The CUDA compiler rejected the generated source (a code generator bug)."""


class CompilerUnavailableError(NNVMError):
    """Neither nvcc nor NVRTC can be used here."""


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for env in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(env)
        if root and os.path.isfile(os.path.join(root, "bin", name)):
            return os.path.join(root, "bin", name)
    return None


def nvcc_path() -> str | None:
    return _tool("nvcc")


def ptxas_path() -> str | None:
    return _tool("ptxas")


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str | None:
    """nvcc's ``release X.Y, VX.Y.Z`` line, or None when nvcc is absent or broken."""
    path = nvcc_path()
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release [^\n]*", out.stdout)
    return m.group(0).strip() if out.returncode == 0 and m else None


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> str | None:
    """NVRTC's version through CuPy, or None (CuPy missing or its NVRTC not loadable)."""
    try:
        from cupy.cuda import nvrtc

        major, minor = nvrtc.getVersion()
        return f"nvrtc {major}.{minor}"
    except Exception:  # ImportError, or a missing libnvrtc raising at first use
        return None


def compiler_reason() -> str | None:
    """None when some CUDA C compiler works here, else what is missing and how to fix it."""
    if nvcc_version() is not None or nvrtc_version() is not None:
        return None
    return ("no CUDA C compiler: nvcc not found (PATH, $CUDA_HOME/bin) and NVRTC not "
            "available through CuPy; install the CUDA toolkit or "
            "pip install nnvm-backend-cuda[cuda12]")


def describe_compiler() -> str:
    return nvcc_version() and f"nvcc ({nvcc_version()})" or nvrtc_version() or "none"


def parse_arches(spec: str | None, default: str = DEFAULT_ARCH) -> list[str]:
    """``"sm_80,sm_90"`` -> ``["sm_80", "sm_90"]`` (validated, sorted, unique).

    Raises:
        NNVMError: an entry that is not ``sm_NN`` / ``compute_NN``.
    """
    words = [w.strip() for w in (spec or default).replace("+", ",").split(",") if w.strip()]
    out = []
    for w in words:
        m = _ARCH_RE.match(w)
        if not m or int(m.group(1)) < 50:
            raise NNVMError(f"target 'cuda -arch={spec}': architecture {w!r} is not valid -> "
                            f"expected sm_NN with NN >= 50 (e.g. sm_80, sm_90), optionally "
                            f"comma-separated (-arch=sm_80,sm_90)")
        out.append("sm_" + w.split("_", 1)[1])
    return sorted(set(out), key=lambda a: (int(re.sub(r"\D", "", a)), a))


def arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch.split("_", 1)[1]))


def cache_dir() -> str | None:
    """The PTX cache folder, ``<cache root>/cuda`` (``nnvm.cache_dirs``); None under
    ``NNVM_CACHE_DIR=off``, when every build compiles and nothing is written."""
    return cache_dirs.package_dir("cuda")


def choose_compiler(preference: str | None = None) -> str:
    """``"nvcc"`` or ``"nvrtc"`` (``preference`` in auto/nvcc/nvrtc).

    Raises:
        CompilerUnavailableError: the preferred (or any) compiler is missing.
    """
    pref = (preference or "auto").lower()
    if pref not in ("auto", "nvcc", "nvrtc"):
        raise NNVMError(f"target 'cuda -compiler={preference}': unknown compiler -> expected "
                        f"auto, nvcc or nvrtc")
    if pref in ("auto", "nvcc") and nvcc_version() is not None:
        return "nvcc"
    if pref in ("auto", "nvrtc") and nvrtc_version() is not None:
        return "nvrtc"
    why = compiler_reason() or f"{pref} is not available here (found: {describe_compiler()})"
    raise CompilerUnavailableError(f"target 'cuda': cannot compile kernels -> {why}")


def cache_key(source: str, arch: str, compiler: str) -> str:
    ident = nvcc_version() if compiler == "nvcc" else nvrtc_version()
    opts = NVCC_OPTIONS if compiler == "nvcc" else NVRTC_OPTIONS
    h = hashlib.sha256()
    for part in (source, arch, compiler, str(ident), " ".join(opts)):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def compile_ptx(source: str, arches: list[str], compiler: str | None = None
                ) -> tuple[dict[str, str], dict]:
    """PTX text per architecture for ``source``, and a report (compiler, cache hits, seconds).

    Raises:
        KernelBuildError: the source does not compile (kernel names and compiler log).
        CompilerUnavailableError: no compiler.
    """
    import time

    comp = choose_compiler(compiler)
    out: dict[str, str] = {}
    report = {"compiler": comp, "version": nvcc_version() if comp == "nvcc" else
              nvrtc_version(), "cache_hits": 0, "compiled": 0, "seconds": 0.0}
    t0 = time.perf_counter()
    missing = []
    folder = cache_dir()
    for arch in arches:
        text = None if folder is None else _read(
            os.path.join(folder, f"{cache_key(source, arch, comp)}.{arch}.ptx"))
        if text is not None:
            report["cache_hits"] += 1
            out[arch] = text
        else:
            missing.append(arch)
    if missing:
        fresh = _nvcc(source, missing) if comp == "nvcc" else \
            {a: _nvrtc(source, a) for a in missing}
        for arch, text in fresh.items():
            if folder is not None:
                _write_atomic(os.path.join(folder, f"{cache_key(source, arch, comp)}.{arch}.ptx"),
                              text.encode("utf-8"))
            out[arch] = text
        report["compiled"] = len(missing)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    return {a: out[a] for a in arches}, report


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    return text if ".entry" in text or ".version" in text else None


def _nvcc(source: str, arches: list[str]) -> dict[str, str]:
    """PTX per arch: one nvcc process per architecture (``-ptx`` takes one), run in parallel."""
    with tempfile.TemporaryDirectory(prefix="nnvm-cuda-") as tmp:
        cu = os.path.join(tmp, "kernels.cu")
        with open(cu, "w", encoding="utf-8") as f:
            f.write(source)
        procs = {}
        for arch in arches:
            ptx = os.path.join(tmp, f"kernels.{arch}.ptx")
            cmd = [nvcc_path(), "-ptx", f"-arch={arch}", *NVCC_OPTIONS, cu, "-o", ptx]
            procs[arch] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True), ptx)
        out, failure = {}, None
        for arch, (proc, ptx) in procs.items():
            try:
                stdout, stderr = proc.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                failure = failure or (f"nvcc -arch={arch}: timed out after 600 s compiling "
                                      f"{source.count('__global__')} kernels")
                continue
            if proc.returncode != 0:
                failure = failure or build_message(source, stderr + stdout, arch, "nvcc")
                continue
            with open(ptx, encoding="utf-8") as f:
                out[arch] = f.read()
        if failure is not None:
            raise KernelBuildError(failure)
        return out


def _nvrtc(source: str, arch: str) -> str:
    from cupy.cuda import compiler

    opts = (*NVRTC_OPTIONS, f"-arch=compute_{arch.split('_', 1)[1]}")
    try:
        return compiler.compile_using_nvrtc(source, opts, name="kernels.cu")
    except compiler.CompileException as exc:
        raise KernelBuildError(build_message(source, str(exc), arch, "nvrtc")) from None


def ptxas_check(ptx: str, arch: str) -> tuple[bool, str]:
    """Assemble ``ptx`` for ``arch`` with ptxas: ``(ok, log)`` (verification only)."""
    path = ptxas_path()
    if path is None:
        return False, "ptxas not found"
    with tempfile.TemporaryDirectory(prefix="nnvm-ptxas-") as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w", encoding="utf-8") as f:
            f.write(ptx)
        res = subprocess.run([path, f"-arch={arch}", src, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True, timeout=600)
    return res.returncode == 0, res.stderr + res.stdout


def build_message(source: str, log: str, arch: str, compiler: str) -> str:
    lines = sorted({int(m) for m in re.findall(r"\((\d+)\): error", log)} |
                   {int(m) for m in re.findall(r":(\d+):\d+: error", log)})
    names = kernels_at_lines(source, lines, r"__global__")
    where = f"kernel(s) {', '.join(names)}" if names else "the program"
    tail = clip_log(log)
    return (f"CUDA build ({compiler}, {arch}) of {where} failed -> the generated source does "
            f"not compile -> this is a code generator bug; please report it with the log below "
            f"(set NNVM_CUDA_DUMP=1 to print the source)\ncompiler log:\n{tail}")


def _write_atomic(path: str, data: bytes) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".nnvm-cuda-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:  # a read-only cache is not an error: the next build compiles again
        pass
