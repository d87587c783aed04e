"""The lean graph executor of the LLVM backend (tvm_ffi only; never imports ``tvm``).

A build produces one shared library (every kernel of the model) and an *executor plan*:
the ordered steps (a kernel function name and the entries it reads and writes, or a NumPy
reference fallback), the storage of every entry, and the weights to repack. At creation the
executor allocates every buffer once (64-byte aligned, shared along the memory plan), wraps
each as a DLPack tensor and precomputes the call list. ``run`` copies the inputs in, makes
ONE call into the C executor (``c_executor``: the loop of the exported C library, over the
same buffers), or one per stretch of compiled steps between host steps, and copies the
outputs out. The per-kernel Python loop remains for ``profile()`` and where no C executor
can be had (no C compiler and nothing cached, or ``NNVM_LLVM_EXECUTOR=python``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
import time
import weakref
from typing import Any

import numpy as np

from nnvm.errors import ExecutionError, NNVMError, SerializationError, format_error, node_where
from nnvm.runtime.module import Module

from . import buffers, c_executor, packing

PLAN_FORMAT = "nnvm-llvm-plan"
PLAN_VERSION = 1
#: shortest stretch of back-to-back runs ``benchmark`` times in C as one sample
C_SAMPLE_SECONDS = 5e-6


def _ffi():
    try:
        import tvm_ffi
    except ImportError as exc:
        raise NNVMError("the llvm runtime needs apache-tvm-ffi: pip install apache-tvm-ffi"
                        ) from exc
    return tvm_ffi


# memfd_create flags: MFD_CLOEXEC keeps the fd out of child processes; MFD_EXEC (Linux 6.3+)
# asks for an executable memfd where the vm.memfd_noexec sysctl would default to noexec.
_MFD_CLOEXEC = getattr(os, "MFD_CLOEXEC", 1)
_MFD_EXEC = 0x0010
_DIR_PREFIX = "nnvm-native-"
#: (memfd name, private directory prefix) by what is loaded: model libraries and the C
#: executor (``c_executor``) are told apart in /proc/self/maps and in leak checks.
_NAMES = {"model": ("nnvm-llvm-lib", _DIR_PREFIX),
          "executor": ("nnvm-c-executor", "nnvm-cexec-native-")}
_STALE_AFTER_S = 600  # a load takes milliseconds; older leftovers of dead pids are swept

#: How the latest ``load_library`` call loaded its code: ``"memfd"`` or the directory used
#: (a diagnostic for tests and bug reports; with concurrent loads the latest one wins).
last_load_method: str | None = None
_load_counter = itertools.count(1)


def _memfd_path(fd: int) -> str:
    """A ``/proc/self/fd/N`` path spelled uniquely for this process's lifetime.

    ``dlopen`` returns an already-loaded library whose name is the same string, and fd
    numbers are reused as soon as they are closed: a second model loaded through the same
    fd number would silently get the first model's library. Each load therefore spells
    the path differently (a counter in binary, as ``./`` or ``.//`` components, which the
    kernel resolves to the same file)."""
    n = next(_load_counter)
    spell = "".join(".//" if (n >> i) & 1 else "./" for i in range(n.bit_length()))
    return f"/proc/self/{spell}fd/{fd}"


def _dlopen(tvm_ffi, path: str):
    """``tvm_ffi`` module from the shared library at ``path``, not kept alive globally.

    The ``.so`` loader is called directly: ``tvm_ffi.load_module`` picks its loader from the
    file extension, which a ``/proc/self/fd/N`` path lacks, and by default registers the
    module in a process-wide list so that it (and its thread pool) is never unloaded."""
    loader = tvm_ffi.get_global_func("ffi.Module.load_from_file.so")
    lib = loader(path, "so")
    lib.__dict__[_DLOPEN_NAME] = path  # for kernel_symbols (not a function lookup)
    return lib


#: where ``_dlopen`` notes, on the module, the name ``dlopen`` knows the library by
_DLOPEN_NAME = "_nnvm_dlopen_name"


def kernel_symbols(lib, names: list[str]) -> list[int] | None:
    """Addresses of the kernels' own entry points in ``lib`` (``__tvm_ffi_<name>``: TVM's
    packed calling convention, called with ``self`` NULL), or None where they cannot be had.

    Why: the ``tvm_ffi`` Function of a library symbol is a C++ closure whose ``safe_call``
    catches exceptions, checks the result's type and then calls the symbol: about 4 ns of a
    one-element kernel's 13 ns call (1 thread, one process). The C executor calls the symbol
    itself, as the exported C library does (``deploy/nnvm_model.c``); errors are raised the
    same way. Found with ``dlopen(RTLD_NOLOAD)`` of the name ``_dlopen`` loaded it by (a
    reference given back at once); valid while ``lib`` (or a function of it) is alive."""
    name = getattr(lib, "__dict__", {}).get(_DLOPEN_NAME)
    if name is None or not hasattr(os, "RTLD_NOLOAD"):
        return None
    import _ctypes  # the dlopen/dlsym/dlclose behind ctypes.CDLL, which cannot dlclose

    try:
        handle = _ctypes.dlopen(name, os.RTLD_LAZY | os.RTLD_NOLOAD)
    except OSError:
        return None
    try:
        return [_ctypes.dlsym(handle, f"__tvm_ffi_{n}") for n in names]
    except (AttributeError, OSError):
        return None
    finally:
        _ctypes.dlclose(handle)


def _load_memfd(tvm_ffi, so_bytes: bytes, name: str = "nnvm-llvm-lib"):
    """Load from an anonymous in-memory file: ``(module, None)``, or ``(None, why not)``.

    Nothing touches a file system (no executable temp dir needed, nothing left behind by a
    crash); the fd is closed once loaded, the mapping keeps the pages alive."""
    if not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"):
        return None, "memfd_create or /proc unavailable"
    fd, err = None, None
    for flags in (_MFD_CLOEXEC | _MFD_EXEC, _MFD_CLOEXEC):  # kernels < 6.3 refuse MFD_EXEC
        try:
            fd = os.memfd_create(name, flags)
            break
        except OSError as exc:
            err = exc
    if fd is None:
        return None, f"memfd_create: {err}"
    try:
        view = memoryview(so_bytes)
        while view:
            view = view[os.write(fd, view):]
        return _dlopen(tvm_ffi, _memfd_path(fd)), None
    except Exception as exc:  # noqa: BLE001 - e.g. a noexec memfd policy: try a directory
        return None, f"memfd: {_last_line(exc)}"
    finally:
        os.close(fd)


def _last_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if text else repr(exc)


def _candidate_dirs() -> list[str]:
    """Parent directories for the private fallback directory, best first."""
    out = []
    if os.environ.get("NNVM_NATIVE_DIR"):
        out.append(os.environ["NNVM_NATIVE_DIR"])
    from ..compiler.cache import configured_dir  # the shared NNVM_CACHE_DIR rule, llvm layout

    cache = configured_dir()
    if cache is not None:  # NNVM_CACHE_DIR=off: no folder of the cache, the temp ones below
        out.append(os.path.join(cache, "native"))
    if os.environ.get("XDG_RUNTIME_DIR"):
        out.append(os.environ["XDG_RUNTIME_DIR"])
    out.append(tempfile.gettempdir())
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by another user
        return True
    return True


def _sweep_stale(parent: str) -> None:
    """Remove private directories left by processes that died while loading: their pid (the
    first field after the prefix) is gone and they are older than ``_STALE_AFTER_S`` (the
    age check protects a load in progress in another pid namespace sharing ``parent``)."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    now = time.time()
    for name in names:
        prefix = next((p for _, p in _NAMES.values() if name.startswith(p)), None)
        if prefix is None:
            continue
        pid = name[len(prefix):].split("-", 1)[0]
        d = os.path.join(parent, name)
        try:
            if not pid.isdigit() or int(pid) == os.getpid() or _pid_alive(int(pid)) \
                    or now - os.lstat(d).st_mtime < _STALE_AFTER_S:
                continue
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
            os.rmdir(d)
        except (OSError, OverflowError):
            pass


def _load_from_dir(tvm_ffi, so_bytes: bytes, parent: str, prefix: str = _DIR_PREFIX):
    """Load through a file in a fresh 0700 directory under ``parent``, removed right after
    ``dlopen`` (the mapping stays valid on POSIX). Raises the OS or loader error."""
    os.makedirs(parent, mode=0o700, exist_ok=True)
    _sweep_stale(parent)
    d = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)  # mode 0700
    path = os.path.join(d, f"lib-{next(_load_counter)}.so")  # a name never loaded before
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with os.fdopen(fd, "wb") as f:
            f.write(so_bytes)
        return _dlopen(tvm_ffi, path)
    finally:
        for remove, target in ((os.unlink, path), (os.rmdir, d)):
            try:
                remove(target)
            except OSError:
                pass


def load_library(so_bytes: bytes, kind: str = "model"):
    """Load a TVM-exported shared library from bytes.

    Where the OS allows it the code is loaded from an in-memory file (``memfd_create``), so
    no writable and executable directory is needed and a crash leaves nothing behind. Else
    it goes through a private 0700 directory (``$NNVM_NATIVE_DIR``, the nnvm cache's
    ``native/``, ``$XDG_RUNTIME_DIR``, then ``$TMPDIR``; the first that allows executable
    mappings), removed as soon as the library is mapped. The library is unloaded (dlclose)
    when the last reference to the returned module goes away. ``kind`` is ``"model"`` or
    ``"executor"`` (the C executor: named apart, and not recorded in ``last_load_method``).
    """
    global last_load_method
    tvm_ffi = _ffi()
    memfd_name, prefix = _NAMES[kind]
    lib, why = _load_memfd(tvm_ffi, so_bytes, memfd_name)
    method = "memfd"
    tried = [why]
    for parent in _candidate_dirs() if lib is None else ():
        try:
            lib = _load_from_dir(tvm_ffi, so_bytes, parent, prefix)
        except Exception as exc:  # noqa: BLE001 - OSError or the loader's RuntimeError
            tried.append(f"{parent}: {_last_line(exc)}")
            continue
        method = parent
        break
    if lib is not None:
        if kind == "model":
            last_load_method = method
        return lib
    raise NNVMError(format_error(
        "llvm runtime, loading the model's native code (lib.so)",
        "the shared library could not be mapped from memory nor from any directory tried",
        "an in-memory file or a private directory allowing executable mappings",
        "; ".join(tried),
        fix="If the errors say 'failed to map segment' or 'Permission denied', those places "
            "are mounted noexec: set NNVM_NATIVE_DIR to a private directory on a file system "
            "mounted without noexec. Otherwise the library is damaged or built for another "
            "CPU or OS: rebuild and re-export the model"))


def graph_fingerprint(graph) -> str:
    """Hash of the node order and names: a plan is only valid for the graph it indexes."""
    names = "\n".join(f"{n.op.name if n.op else 'null'}:{n.name}" for n in graph.index.nodes)
    return hashlib.sha256(names.encode()).hexdigest()[:16]


_param_versions = itertools.count(1)


class _Params(dict):
    """A module's params that mark their changes (``version``, unique across all such
    dicts, so replacing the dict is a change too), so ``run`` knows in O(1) whether the
    bound weights are stale: comparing every param's identity on every run cost about
    0.1-0.4 us per param, a large part of a small model's run."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.version = next(_param_versions)

    def _changed(self):
        self.version = next(_param_versions)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key):
        super().__delitem__(key)
        self._changed()

    def __ior__(self, other):
        self.update(other)
        return self

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self._changed()

    def pop(self, *args):
        self._changed()
        return super().pop(*args)

    def popitem(self):
        self._changed()
        return super().popitem()

    def setdefault(self, key, default=None):
        self._changed()
        return super().setdefault(key, default)

    def clear(self):
        super().clear()
        self._changed()


class LLVMModule(Module):
    """Runtime module of the ``llvm`` target.

    Args:
        graph: the optimised graph the plan indexes (also used for reference fallbacks).
        params: weights in model layout.
        target: the target string.
        lib: the loaded library (a ``tvm_ffi.Module``).
        so_bytes: the library file, exported as ``lib.so``.
        plan: the executor plan (see ``nnvm_llvm.compiler.codegen``).
        build_info: compiler statistics for ``stats()`` (after loading: only the applied tuning).

    Thread safety: ``run(**inputs)`` may be called from many threads; calls are serialised
    by the module's lock (``Module._lock``), held for the whole call including the binding
    of its inputs. A lock, not per-call buffers, because the executor's state is one
    activation arena that every precomputed kernel call points into (a per-call arena would
    cost the model's activation memory and the DLPack wrapping once per concurrent call),
    and one run already spreads its kernels over every core through the library's thread
    pool, so concurrent runs would mostly compete for the same cores.

    Lifetime: the library and its thread pool belong to this module. When the module is
    garbage collected the pool's worker threads are joined and the library is unloaded, so
    a process that loads and drops models keeps a flat thread count and address space.
    """

    def __init__(self, graph, params, target: str, lib, so_bytes: bytes, plan: dict,
                 build_info: dict | None = None, num_threads: int | None = None):
        super().__init__(graph, params, target)
        if plan.get("format") != PLAN_FORMAT or plan.get("version") != PLAN_VERSION:
            raise SerializationError(format_error("llvm executor plan", "unsupported format",
                                                  f"{PLAN_FORMAT} v{PLAN_VERSION}",
                                                  f"{plan.get('format')} v{plan.get('version')}",
                                                  fix="Rebuild with this nnvm-backend-llvm"))
        if plan.get("graph") != graph_fingerprint(graph):
            raise SerializationError("llvm executor plan: it was made for a different graph "
                                     "(node order or names differ); rebuild the model")
        self._lib = lib
        # Join the library's worker threads when this module goes away (the library itself
        # is dlclosed once the last function handle into it is freed, right after). The
        # finalizer holds the config function, not the module, so it cannot keep it alive.
        try:
            config = lib["nnvm_runtime_config"]
        except Exception as exc:  # noqa: BLE001 - tvm_ffi raises AttributeError
            raise SerializationError(format_error(
                "llvm library", "has no thread pool (function 'nnvm_runtime_config')",
                fix="The artifact's lib.so was not made by nnvm-backend-llvm or is damaged; "
                    "re-export the model")) from exc
        self._release = weakref.finalize(self, _stop_pool, config)
        self._so_bytes = so_bytes
        self._plan = plan
        self._build_info = dict(build_info or {})
        self.num_threads = self.set_num_threads(
            num_threads if num_threads is not None else int(plan.get("num_threads", 0)))
        self._allocate()
        self._bind_params()
        self._bound_version = self.params.version
        self._make_calls()

    @property
    def params(self) -> dict:
        """The weights the module runs with; assigning to it or to its items rebinds them
        on the next run (the dict counts its changes, see ``_Params``)."""
        return self._params

    @params.setter
    def params(self, value) -> None:
        self._params = _Params(value)

    # -- setup ---------------------------------------------------------------------------------
    def _allocate(self) -> None:
        idx = self.graph.index
        rptr = idx.entry_rptr
        entries = {int(k): v for k, v in self._plan["entries"].items()}
        self._entry_info = entries
        var_entries = {rptr[nid]: idx.nodes[nid].name for nid in idx.input_nodes}
        self._var_entries = var_entries
        sizes, storage = {}, {}
        for eid, info in entries.items():
            if eid in var_entries or info["dtype"] == "string":
                continue
            shape, dtype = tuple(info["shape"]), info["dtype"]
            sizes[eid] = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            storage[eid] = info["storage"]
        sid = [-1] * idx.num_node_entries
        for eid, s in storage.items():
            sid[eid] = s
        self._storage = buffers.StoragePlan(sizes, sid)
        self._arrays: dict[int, np.ndarray] = {}
        for eid, info in entries.items():
            shape, dtype = tuple(info["shape"]), info["dtype"]
            if dtype == "string":  # object arrays of str: only reference kernels touch them
                self._arrays[eid] = np.empty(shape, dtype=object)
            elif eid in var_entries:
                self._arrays[eid] = buffers.view(buffers.aligned_empty(
                    int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize), shape, dtype)
            else:
                self._arrays[eid] = self._storage.entry(eid, shape, dtype)
        self._packed = {key: None for key in self._plan["packed"]}
        self._bound_params: dict[str, Any] = {}

    def _bind_params(self) -> None:
        """Copy params into their aligned buffers and repack the ones kernels read packed."""
        name_to_entry = {n: e for e, n in self._var_entries.items()}
        for name, value in self.params.items():
            if self._bound_params.get(name) is value:
                continue
            baked = self._plan.get("baked", {})
            if name in baked and not np.array_equal(np.asarray(value, np.float64).reshape(-1),
                                                    [baked[name]]):
                raise ExecutionError(format_error(
                    f"llvm module, param '{name}'", "was compiled into the kernels as a "
                    "constant and cannot be rebound", baked[name], np.asarray(value).tolist(),
                    fix="Rebuild the model with the new value"))
            self._bound_params[name] = value
            eid = name_to_entry.get(name)
            if eid is not None and eid in self._arrays:
                np.copyto(self._arrays[eid], value)
            for key, spec in self._plan["packed"].items():
                if spec["param"] == name:
                    arr = packing.pack(spec["layout"], value, spec["block"])
                    if self._packed[key] is None:
                        self._packed[key] = buffers.aligned_copy(arr)
                    else:
                        np.copyto(self._packed[key], arr)

    def _sync_params(self) -> None:
        """Rebind the params changed since the last run (``set_input(w=...)``,
        ``lib.params[k] = v``); the caller holds the lock."""
        if self.params.version != self._bound_version:
            self._bind_params()
            self._bound_version = self.params.version

    def _make_calls(self) -> None:
        tvm_ffi = _ffi()
        idx = self.graph.index
        tensors: dict[Any, Any] = {}

        def tensor(ref):
            key = ("p", ref["packed"]) if "packed" in ref else ("e", ref["entry"])
            if key not in tensors:
                arr = self._packed[ref["packed"]] if key[0] == "p" else self._arrays[ref["entry"]]
                tensors[key] = (len(tensors), arr, tvm_ffi.from_dlpack(arr))
            return tensors[key]

        calls, names, c_steps = [], [], []  # c_steps: (kernel, tensor ids), None = host
        self._call_nodes: list[list[int]] = []  # node ids of each call (profiler FLOPs)
        self._fallbacks: list[str] = []
        self._control_flow: list = []  # nodes whose bodies run compiled (subgraphs.py)
        for step in self._plan["steps"]:
            if step["kind"] == "kernel":
                try:
                    fn = self._lib[step["func"]]
                except Exception as exc:  # noqa: BLE001 - tvm_ffi raises its own errors
                    raise SerializationError(format_error(
                        "llvm library", f"has no function '{step['func']}'",
                        fix="The artifact's lib.so and plan disagree; re-export it")) from exc
                calls.append((fn, tuple(tensor(a)[2] for a in step["args"])))
                c_steps.append((fn, [tensor(a)[0] for a in step["args"]]))
                names.append(step["func"])
                self._call_nodes.append([int(n) for n in step.get("nodes") or ()])
            else:
                node = idx.nodes[step["node"]]
                calls.append(self._reference_call(node, step))
                c_steps.append(None)
                names.append(f"reference:{node.op.name}")
                self._call_nodes.append([step["node"]])
                if not node.subgraphs:
                    self._fallbacks.append(node.op.name)
        self._calls = calls
        self._call_names = names
        self._inputs = [(self._arrays[e], n) for e, n in self._var_entries.items()
                        if n not in self.params and e in self._arrays]
        self._outputs_arr = [self._arrays[e] for e in idx.output_entries]
        self._exact_inputs = {n: (a.dtype, a.shape) for a, n in self._inputs}
        self._runs = self._c_runs([a for _, a, _ in tensors.values()], c_steps)

    def _c_runs(self, arrays: list, c_steps: list) -> list:
        """What one run calls: ``(callable, args, first step)`` per stretch of compiled
        steps (one C call each) and per host step; the per-kernel Python loop
        (``self._calls``) where the C executor cannot be had (see ``c_executor``)."""
        wanted = c_executor.mode()
        lib = c_executor.library() if wanted != "python" else None
        if lib is None:
            why = "NNVM_LLVM_EXECUTOR=python" if wanted == "python" else c_executor.reason()
            if wanted == "c":
                raise ExecutionError(format_error(
                    "llvm runtime, NNVM_LLVM_EXECUTOR=c", "the C executor is unavailable",
                    "a C compiler or a cached executor", why,
                    fix="Install gcc (or set CC), or unset NNVM_LLVM_EXECUTOR"))
            self.executor = f"python ({why})"
            self._c = None
            return [(fn, args, k) for k, (fn, args) in enumerate(self._calls)]
        funcs: dict[int, int] = {}  # id(kernel function) -> function id
        kernels, kernel_names, steps, c_index = [], [], [], []
        for k, fn_ids in enumerate(c_steps):
            if fn_ids is not None:
                fn, ids = fn_ids
                if id(fn) not in funcs:
                    funcs[id(fn)] = len(kernels)
                    kernels.append(fn)
                    kernel_names.append(self._call_names[k])
                steps.append((funcs[id(fn)], ids))
            c_index.append(len(steps))  # compiled steps up to and including this one
        symbols = kernel_symbols(self._lib, kernel_names) if kernels else None
        self._c = c_executor.CExecutor(lib, arrays, symbols or kernels, steps)
        self._kernel_calls = "symbol" if symbols else "function"  # how the C loop calls them
        self._c_step_call = [k for k, c in enumerate(c_steps) if c is not None]
        self.executor = "c"
        runs, lo = [], 0
        for k, c in enumerate(c_steps):
            if c is None:
                hi = c_index[k]
                if hi > lo:
                    runs.append((self._c.run, (self._c.handle, lo, hi), lo))
                runs.append((self._calls[k][0], (), -1 - k))
                lo = hi
        if len(steps) > lo:
            runs.append((self._c.run, (self._c.handle, lo, len(steps)), lo))
        return runs

    def _reference_call(self, node, step):
        kernel = node.op.get_attr("FReferenceNode")
        if kernel is None:
            plain = node.op.get_attr("FReference")
            kernel = (lambda n, *a: plain(n.attrs, *a)) if plain is not None else None
        if kernel is None:
            raise ExecutionError(format_error(node_where(node), "has no compiled kernel and no "
                                              "reference kernel"))
        ins = [self._arrays[e] for e in step["inputs"]]
        outs = [self._arrays[e] for e in step["outputs"]]
        if node.subgraphs:  # control flow: decided on the host, bodies compiled on first use
            from .subgraphs import SubgraphRunner

            node.info["subgraph_runner"] = SubgraphRunner(self.target, self.num_threads)
            self._control_flow.append(node)

        def run_reference(*_):
            res = kernel(node, *ins)
            res = res if isinstance(res, (tuple, list)) else (res,)
            for o, r in zip(outs, res):
                np.copyto(o, np.asarray(r).reshape(o.shape), casting="unsafe")

        return run_reference, ()

    # -- running -------------------------------------------------------------------------------
    def set_num_threads(self, num_threads: int = 0) -> int:
        """Size the kernel thread pool; 0 = TVM_NUM_THREADS, else the CPU count."""
        with self._lock:  # resizing joins the workers: never in the middle of a run
            self.num_threads = int(self._lib["nnvm_runtime_config"](int(num_threads)))
        return self.num_threads

    def run(self, **inputs: Any) -> list[np.ndarray]:
        """Run once (see ``Module.run``); safe from many threads (calls are serialised, see
        the class docstring). An input passed as a NumPy array of exactly the compiled dtype
        and shape skips conversion (the per-frame path of small models)."""
        exact = self._exact_inputs
        with self._lock:
            for k, v in inputs.items():
                want = exact.get(k)
                if want is not None and k not in self.params and type(v) is np.ndarray \
                        and v.dtype == want[0] and v.shape == want[1]:
                    self._feed[k] = v
                else:
                    self._bind(k, v)
            if len(self._feed) < len(self._inputs):
                return super().run()  # raises the missing-input error
            self._outputs = self._execute(self._feed)
            return list(self._outputs)

    def _store(self, name: str, arr: np.ndarray) -> None:
        """Rebinding a param (an overridable initializer, ``set_input(W=...)``) also drops
        a value the fast path of ``run`` kept for it, which would otherwise win over the
        param in every later run."""
        super()._store(name, arr)
        if name in self.params:
            self._feed.pop(name, None)

    def _execute(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        self._sync_params()
        for arr, name in self._inputs:
            np.copyto(arr, feed[name])
        run = None
        try:
            for run in self._runs:
                run[0](*run[1])
        except NNVMError:
            raise
        except Exception as exc:
            raise ExecutionError(format_error(f"llvm kernel '{self._failed_call(run)}'",
                                              f"failed: {exc}")) from exc
        return [a.copy() for a in self._outputs_arr]

    def _failed_call(self, run) -> str:
        """The step name behind a failed entry of ``self._runs``."""
        if run is None:
            return "?"
        first = run[2]
        if self._c is None or first < 0:  # a Python-loop kernel or a host step
            return self._call_names[first if first >= 0 else -1 - first]
        failed = self._c.failed_step()
        return self._call_names[self._c_step_call[failed]] if failed >= 0 else "?"

    def benchmark(self, repeat: int = 100, warmup: int = 5) -> float:
        """Median seconds of one run of the kernels (inputs already bound), no copies."""
        with self._lock:
            return self._benchmark(repeat, warmup)

    def _benchmark(self, repeat: int, warmup: int) -> float:
        runs = self._runs  # what run() calls: the C executor where there is one
        for _ in range(warmup):
            for fn, args, _ in runs:
                fn(*args)
        if self._c is not None and len(runs) == 1 and runs[0][2] >= 0:
            return self._c_benchmark(runs[0][1], repeat)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for fn, args, _ in runs:
                fn(*args)
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    def _c_benchmark(self, span: tuple, repeat: int) -> float:
        """Median seconds of one run when every step is compiled: timed inside the C
        executor, in samples of back-to-back runs lasting at least ``C_SAMPLE_SECONDS``
        (``repeat`` runs in all), since a Python clock read and call cost about as much as
        a microsecond kernel and would be most of what a per-run timing measured."""
        handle, lo, hi = span
        once = self._c.time(handle, lo, hi, 1) * 1e-9
        inner = max(1, min(repeat, int(C_SAMPLE_SECONDS / max(once, 1e-9))))
        return float(np.median([self._c.time(handle, lo, hi, inner) * 1e-9 / inner
                                for _ in range(max(1, repeat // inner))]))

    def profile(self, repeat: int = 20, warmup: int = 2) -> list[tuple[str, float]]:
        """Median seconds of every step (kernel function or ``reference:<op>``), in
        execution order: where the time of a run goes (inputs already bound)."""
        with self._lock:
            return self._profile(repeat, warmup)

    def _profile(self, repeat: int, warmup: int) -> list[tuple[str, float]]:
        for _ in range(warmup):
            for fn, args in self._calls:
                fn(*args)
        times = np.zeros((repeat, len(self._calls)))
        clock = time.perf_counter
        for r in range(repeat):
            for s, (fn, args) in enumerate(self._calls):
                t0 = clock()
                fn(*args)
                times[r, s] = clock() - t0
        med = np.median(times, axis=0)
        return [(n, float(t)) for n, t in zip(self._call_names, med)]

    def step_nodes(self) -> list[list[int]]:
        """Graph node ids of every step, in ``profile()`` order (a kernel's fused group; an
        artifact exported before the plan recorded them gives empty lists)."""
        return [list(n) for n in self._call_nodes]

    # -- stats and export ----------------------------------------------------------------------
    def _num_kernels(self) -> int:
        return len(self._calls)

    def export_c(self, path: str) -> str:
        """Write ``path/libnnvm_model.so``, ``nnvm_model.h`` and ``example.c``: this model as
        a C library that needs only libc (see ``nnvm_llvm.export_c`` and docs/deploy.md)."""
        from ..export_c import export_c

        return export_c(self, path)

    def stats(self) -> dict[str, Any]:
        """Core stats plus: ``num_fallback_kernels`` / ``fallback_ops`` (steps run by NumPy
        reference kernels because no lowering rule exists), ``num_compiled_kernels``
        (distinct functions in the library), ``executor_bytes`` (bytes the executor actually
        allocated for activations), ``packed_weight_bytes``, ``lib_bytes``, ``num_threads``
        and, after a build, compile time and kernel-cache hits."""
        s = super().stats()
        s.update({
            "num_fallback_kernels": len(self._fallbacks),
            "fallback_ops": sorted(set(self._fallbacks)),
            "num_compiled_kernels": len({n for n in self._call_names
                                         if not n.startswith("reference:")}),
            "executor_bytes": self._storage.nbytes,
            "packed_weight_bytes": int(sum(a.nbytes for a in self._packed.values()
                                           if a is not None)),
            "lib_bytes": len(self._so_bytes),
            "num_threads": self.num_threads,
            # "c" (one C call per run) or "python (why not c)": see runtime/c_executor.py
            "executor": self.executor,
            # control-flow steps: the decision on the host, the bodies compiled on first run
            "control_flow_ops": sorted({n.op.name for n in self._control_flow}),
        })
        s.update(self._build_info)
        return s

    def _artifact_members(self) -> dict[str, bytes]:
        plan = dict(self._plan, num_threads=0)
        return {"lib.so": self._so_bytes,
                "executor.json": json.dumps(plan, sort_keys=True).encode("utf-8")}


def _stop_pool(config) -> None:
    """Join the library's pool workers (a pool of one thread has none) before unloading:
    a worker left spinning in a dlclosed library would crash the process."""
    try:
        config(1)
    except Exception:  # noqa: BLE001 - at interpreter exit tvm_ffi may already be gone
        pass


def load_artifact(artifact, num_threads: int | None = None) -> LLVMModule:
    """Create a module from a verified artifact (hashes already checked by core)."""
    for member in ("lib.so", "executor.json"):
        if member not in artifact.members:
            raise SerializationError(f"llvm artifact: member '{member}' is missing; re-export "
                                     f"the model with target llvm")
    from .plan_schema import PLAN_SCHEMA, check_plan

    plan = artifact.json_member("executor.json", PLAN_SCHEMA)
    check_plan(plan, artifact.graph(), artifact.params)  # before any native code is mapped
    so = artifact.members["lib.so"]
    lib = load_library(so)
    tuning = plan.get("tuning", {"tuned": 0, "records": []})  # what build applied, shipped
    return LLVMModule(artifact.graph(), artifact.params, artifact.manifest["target"], lib, so,
                      plan, build_info={"tuning": tuning}, num_threads=num_threads)
