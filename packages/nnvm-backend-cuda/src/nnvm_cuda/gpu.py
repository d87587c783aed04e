"""The GPU side of a CUDA module: one stream, one arena allocation, pinned staging, launches.

Created on the first ``run`` (never at build or load time, so a machine without a GPU can
build, export and load). Everything is enqueued on the session's own non-blocking stream:
pinned host -> arena copies of the inputs, the kernels (and cuBLAS calls) in plan order,
arena -> pinned copies of the outputs, then one synchronisation. Launch shapes are checked
against the device's attributes (``cudaDeviceGetAttribute``) and each kernel's register
limit (``cuFuncGetAttribute``) before the first launch. CUDA errors become ``ExecutionError``
naming the kernel and its fused group; an asynchronous fault is named by kernel when
``NNVM_CUDA_SYNC=1`` (synchronise after every launch).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from nnvm_codegen_c.arena import host_only
from nnvm.errors import ExecutionError, NNVMError, format_error, node_where
from nnvm.interpreter import _np_dtype, run_reference

from . import cublas
from . import device as devices
from .toolchain import NVRTC_OPTIONS, arch_number

INT32_MAX = 2 ** 31 - 1


def _cuda_errors(cp) -> tuple:
    errs = [cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError]
    try:
        errs.append(cp.cuda.memory.OutOfMemoryError)
    except AttributeError:
        pass
    return tuple(errs)


def load_code(cp, source: str, ptx: dict[str, str], cc: int, probe: str | None):
    """A ``cupy.RawModule`` for a device of compute capability ``cc`` (e.g. 90).

    ``probe`` is one kernel name, looked up to force the (lazy) load inside the fallback
    chain. Prefers the artifact's PTX for the highest architecture <= cc (the driver JIT-compiles it
    for the device); falls back to NVRTC from ``kernels.cu`` when there is none or the driver
    rejects it (e.g. a PTX ISA newer than the driver). Returns ``(module, how)``.
    """
    errors = []
    for arch in sorted(ptx, key=arch_number, reverse=True):
        if arch_number(arch) > cc:
            continue
        fd, path = tempfile.mkstemp(suffix=f".{arch}.ptx", prefix="nnvm-cuda-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(ptx[arch])
            mod = cp.RawModule(path=path)
            if probe is not None:
                mod.get_function(probe)  # loads (driver-JITs) the PTX now, before unlinking
            return mod, f"ptx {arch}"
        except Exception as exc:  # noqa: BLE001 (driver JIT failure: try the next source)
            errors.append(f"{arch}: {exc}")
        finally:
            os.unlink(path)
    try:
        mod = cp.RawModule(code=source, options=NVRTC_OPTIONS, backend="nvrtc")
        if probe is not None:
            mod.get_function(probe)
        return mod, f"nvrtc sm_{cc}"
    except Exception as exc:  # noqa: BLE001
        errors.append(f"nvrtc: {exc}")
    raise ExecutionError(format_error(
        f"cuda device (sm_{cc})", "cannot load the model's kernels",
        f"PTX for an architecture <= sm_{cc} or a working NVRTC",
        "; ".join(errors) or f"PTX only for {', '.join(sorted(ptx)) or 'nothing'}",
        fix="Rebuild with -arch=sm_NN matching the GPU, or update the NVIDIA driver"))


class GPUSession:
    """Device state of one CUDAModule (see the module docstring)."""

    def __init__(self, module, ordinal: int):
        import cupy as cp

        self.cp = cp
        self.m = module
        self.info = module.info
        self.errors = _cuda_errors(cp)
        self.sync_each = bool(os.environ.get("NNVM_CUDA_SYNC"))
        try:
            self.dev = cp.cuda.Device(ordinal)
            with self.dev:
                self.limits = devices.limits(ordinal)
                cc = int(self.dev.compute_capability)
                self.stream = cp.cuda.Stream(non_blocking=True)
                names = [k.name for st in module.steps for k in st.kernels]
                self.code, self.code_from = load_code(cp, module.source, module.ptx, cc,
                                                      names[0] if names else None)
                self._alloc_arena()
                self.launches = {k.name: self._bind(k) for s in module.steps
                                 for k in s.kernels}
        except NNVMError:
            raise
        except self.errors as exc:
            raise ExecutionError(f"cuda device {ordinal}: setup failed -> {exc}") from None
        self.staging: dict[int, np.ndarray] = {}
        self.uploaded: dict[str, int] = {}

    # -- setup -------------------------------------------------------------------------------
    def _alloc_arena(self) -> None:
        cp, nbytes = self.cp, self.m.arena_bytes
        free, total = cp.cuda.runtime.memGetInfo()
        if nbytes > free:
            raise ExecutionError(format_error(
                f"cuda device {self.dev.id}", "out of device memory for the model's arena",
                f"at most {free} free bytes (of {total})", f"{nbytes} bytes",
                fix="Use a smaller batch or input size, or another device (-device=N)"))
        try:
            self.arena = cp.empty((nbytes,), dtype=cp.uint8)
        except self.errors as exc:
            raise ExecutionError(f"cuda device {self.dev.id}: cannot allocate the {nbytes}-byte "
                                 f"arena ({exc}) -> use a smaller batch or another device"
                                 ) from None

    def _bind(self, k):
        node = self.info.idx.nodes[k.group] if 0 <= k.group < self.info.idx.num_nodes else None
        where = f"cuda kernel {k.name}" + (f" ({node_where(node)})" if node is not None else "")
        try:
            fn = self.code.get_function(k.name)
        except self.errors as exc:
            raise ExecutionError(f"{where}: not found in the loaded module ({exc}) -> the "
                                 f"artifact's PTX and plan.json disagree; re-export") from None
        args = []
        for a in k.args:
            item = _np_dtype(a.dtype).itemsize
            off = self.m.offsets[a.entry] // item
            if off > INT32_MAX:
                raise ExecutionError(f"{where}: element offset {off} does not fit int32 -> the "
                                     f"model's arena is too large for 32-bit indexing")
            args += [self.arena, np.int32(off)]
        gs = tuple(int(g) for g in k.global_size)
        if k.local_size is None:
            block = (min(256, int(fn.max_threads_per_block)),)
        else:
            block = tuple(int(v) for v in k.local_size)[:len(gs)]
        block3 = (block + (1, 1, 1))[:3]
        grid3 = tuple(max(1, -(-g // b)) for g, b in zip((gs + (1, 1, 1))[:3], block3))
        lim = self.limits
        threads = block3[0] * block3[1] * block3[2]
        max_threads = min(lim["max_work_group_size"], int(fn.max_threads_per_block))
        if threads > max_threads or any(b > m for b, m in zip(block3, lim["max_block"])):
            raise ExecutionError(format_error(
                where, "block too large for the device", f"<= {max_threads} threads and "
                f"dims <= {lim['max_block']}", block3,
                fix="Rebuild for this device (its limits are lower than the architecture's)"))
        if any(g > m for g, m in zip(grid3, lim["max_grid"])):
            raise ExecutionError(format_error(where, "grid exceeds the device's limits",
                                              f"<= {lim['max_grid']}", grid3,
                                              fix="Use a smaller batch or input size"))
        return fn, grid3, block3, tuple(args), where

    # -- data movement -----------------------------------------------------------------------
    def view(self, entry: int):
        """A cupy array aliasing ``entry``'s slot in the arena."""
        cp = self.cp
        shape = self.info.shapes[entry]
        dtype = _np_dtype(self.info.dtypes[entry])
        return cp.ndarray(tuple(shape), dtype=dtype,
                          memptr=self.arena.data + self.m.offsets[entry])

    def _pinned(self, entry: int) -> np.ndarray:
        buf = self.staging.get(entry)
        if buf is None:
            import cupyx

            buf = cupyx.empty_pinned(tuple(self.info.shapes[entry]),
                                     dtype=_np_dtype(self.info.dtypes[entry]))
            self.staging[entry] = buf
        return buf

    def write(self, entry: int, value) -> None:
        if host_only(self.info.dtypes[entry]):  # strings: no arena slot, kept on the host
            self.staging[entry] = np.asarray(value, dtype=object).reshape(
                tuple(self.info.shapes[entry]))
            return
        host = self._pinned(entry)
        np.copyto(host, np.asarray(value, dtype=host.dtype).reshape(host.shape))
        if host.nbytes:
            self.view(entry).set(host, stream=self.stream)

    def read(self, entry: int, sync: bool = True) -> np.ndarray:
        if host_only(self.info.dtypes[entry]):
            return self.staging[entry]
        host = self._pinned(entry)
        if host.nbytes:
            try:  # CuPy >= 13: an asynchronous copy into the pinned buffer
                self.view(entry).get(stream=self.stream, out=host, blocking=False)
            except TypeError:
                self.view(entry).get(stream=self.stream, out=host)
        if sync:
            self.stream.synchronize()
        return host

    # -- execution ---------------------------------------------------------------------------
    def run(self, feed: dict) -> list[np.ndarray]:
        m, info = self.m, self.info
        idx = info.idx
        last = "input upload"
        try:
            with self.dev, self.stream:
                for nid in idx.input_nodes:
                    name = idx.nodes[nid].name
                    if name in m.params:
                        if self.uploaded.get(name) == id(m.params[name]):
                            continue
                        self.uploaded[name] = id(m.params[name])
                    self.write(info.entry(nid, 0), feed[name])
                for si, step in enumerate(m.steps):
                    if step.kind == "host":
                        last = f"host step {idx.nodes[step.root].name}"
                        self._run_host(step)
                    elif si in m.cublas_steps:
                        last = f"cuBLAS GEMM of {idx.nodes[step.root].name}"
                        cublas.run(self.cp, self.view, info, step)
                    else:
                        for k in step.kernels:
                            fn, grid, block, args, last = self.launches[k.name]
                            fn(grid, block, args)
                            if self.sync_each:
                                self.stream.synchronize()
                outs = []
                for e in idx.output_entries:
                    nid = info.entry_node[e]
                    if idx.nodes[nid].op is None:
                        outs.append(np.asarray(feed[idx.nodes[nid].name]).copy())
                    else:
                        outs.append(self.read(e, sync=False))
                last = "output download"
                self.stream.synchronize()
                return [o.copy() for o in outs]
        except self.errors as exc:
            hint = "" if self.sync_each else (" (kernels run asynchronously: the fault may "
                                              "come from an earlier launch; set "
                                              "NNVM_CUDA_SYNC=1 to name the failing kernel)")
            raise ExecutionError(f"{last}: CUDA error {type(exc).__name__}: {exc}{hint}"
                                 ) from None

    def _run_host(self, step) -> None:
        node = self.info.idx.nodes[step.root]
        args = [self.read(e).copy() for e in self.info.inputs(step.root)]
        res = run_reference(node, *args)
        for e, r in zip(step.outputs, res):
            self.write(e, r)
        self.stream.synchronize()  # the pinned staging buffers are reused by later steps
