"""Export an ``llvm`` module as a standalone C library (``nnvm export-c``, ``lib.export_c``).

Why: the smallest Python deployment of an llvm model is a ~100 MB environment, and a C/C++,
Go or Rust program cannot use it at all. The exported directory holds

* ``libnnvm_model.so``: the executor loop over the static memory plan in C
  (``deploy/nnvm_model.c``), the executor plan as static tables, the weights (params and
  pre-packed kernel layouts) as one read-only 64-byte aligned blob, and the model's kernel
  library (the module's ``lib.so``, with its thread pool) embedded as read-only data and
  mapped once per process. It needs libc, libm and pthreads only: no Python, no TVM, no
  libtvm_ffi, nothing to load from disk at run time.
* ``nnvm_model.h``: the API (issue 19), with every input's and output's name, dtype and
  shape as comments.
* ``example.c``: reads inputs from files, runs once, writes outputs.

Exporting needs a C compiler (``$CC``, else ``cc``/``gcc``) and the apache-tvm-ffi headers
(shipped in the wheel the llvm runtime already needs), not apache-tvm: a downloaded
``.nnvm`` artifact can be exported on the deployment machine. The kernels are the module's
own code, so the library runs on the CPUs the module was built for (``-mcpu``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from nnvm.errors import NNVMError, format_error

from .runtime import c_executor

_DEPLOY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deploy")
ALIGN = 64
LIB_NAME = "libnnvm_model.so"


def _c_str(s: str) -> str:
    return json.dumps(s)  # a JSON string literal is a valid C string literal for these names


def _compiler() -> str:
    cc = c_executor.compiler()
    if cc is None:
        raise NNVMError(format_error("nnvm export-c", "no C compiler found",
                                     "cc, gcc or $CC", "none on PATH",
                                     fix="Install gcc (apt-get install gcc) or set CC"))
    return cc


def _check_exportable(module) -> None:
    refs = [s for s in module._plan["steps"] if s["kind"] != "kernel"]
    if refs:
        idx = module.graph.index
        nodes = ", ".join(f"{idx.nodes[s['node']].name} ({idx.nodes[s['node']].op.name})"
                          for s in refs[:10])
        more = f" and {len(refs) - 10} more" if len(refs) > 10 else ""
        raise NNVMError(format_error(
            "nnvm export-c", f"{len(refs)} step(s) run as NumPy reference kernels on the host "
            f"(no llvm lowering): {nodes}{more}", "every step compiled into the library",
            f"fallback ops {sorted({idx.nodes[s['node']].op.name for s in refs})}",
            fix="A C library cannot call NumPy: rewrite those ops in the model, add an llvm "
                "lowering rule for them, or deploy with Python (lib.export + nnvm.load)"))


class _Layout:
    """The tensor table: every buffer a kernel or the API touches, and where it lives."""

    def __init__(self, module):
        self.m = module
        self.tensors: list[dict] = []
        self.shapes: list[int] = []
        self.by_key: dict = {}
        self.blob = bytearray()
        self.arena_bytes = 0
        self.pool_off: dict = {}

    def _blob_add(self, arr: np.ndarray) -> int:
        pad = (-len(self.blob)) % ALIGN
        self.blob += b"\0" * pad
        off = len(self.blob)
        self.blob += np.ascontiguousarray(arr).tobytes()
        return off

    def _arena_add(self, nbytes: int) -> int:
        off = self.arena_bytes
        self.arena_bytes += max(nbytes, 1) + (-max(nbytes, 1)) % ALIGN
        return off

    def tensor(self, key, where: str) -> int:
        if key in self.by_key:
            return self.by_key[key]
        m = self.m
        if key[0] == "p":
            arr = m._packed[key[1]]
            if arr is None:
                raise NNVMError(format_error(where, f"packed weight '{key[1]}' is not bound",
                                             fix="Set every param before exporting"))
            shape, dtype, in_blob, off = arr.shape, arr.dtype.name, 1, self._blob_add(arr)
        else:
            eid = key[1]
            info = m._entry_info[eid]
            shape, dtype = tuple(info["shape"]), info["dtype"]
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            name = m._var_entries.get(eid)
            if name is not None and name in m.params:  # a weight: read-only, in the blob
                in_blob, off = 1, self._blob_add(m._arrays[eid])
            elif name is not None:  # a model input: its own buffer
                in_blob, off = 0, self._arena_add(nbytes)
            else:  # an activation: shares its pool along the static memory plan
                pkey = m._storage.key_of[eid]
                if pkey not in self.pool_off:
                    self.pool_off[pkey] = self._arena_add(int(m._storage.pools[pkey].nbytes))
                in_blob, off = 0, self.pool_off[pkey]
        code, bits = c_executor.dl_dtype(dtype, where)
        self.by_key[key] = len(self.tensors)
        self.tensors.append({"in_blob": in_blob, "offset": off, "ndim": len(shape),
                             "shape_off": len(self.shapes), "code": code, "bits": bits,
                             "nbytes": int(np.prod(shape, dtype=np.int64)) * (bits // 8),
                             "dtype": np.dtype(dtype).name, "shape": list(shape)})
        self.shapes.extend(int(d) for d in shape)
        return self.by_key[key]


def _data_header(module, lay: _Layout) -> tuple[str, list, list]:
    m = module
    funcs, steps, step_args = [], [], []
    for k, step in enumerate(m._plan["steps"]):
        where = f"step {k} ({step['func']})"
        ids = [lay.tensor(("p", a["packed"]) if "packed" in a else ("e", a["entry"]), where)
               for a in step["args"]]
        fname = "__tvm_ffi_" + step["func"]
        if fname not in funcs:
            funcs.append(fname)
        steps.append((funcs.index(fname), len(ids), len(step_args)))
        step_args.extend(ids)
    inputs = [(n, lay.tensor(("e", e), f"input '{n}'")) for e, n in m._var_entries.items()
              if n not in m.params and e in m._arrays]
    outputs = [(n, lay.tensor(("e", e), f"output '{n}'"))
               for e, n in zip(m.graph.index.output_entries, m.output_names)]

    def arr(ctype, name, values, fmt=str):
        body = ", ".join(fmt(v) for v in values) or "0"
        return f"static const {ctype} {name}[] = {{{body}}};\n"

    out = ["/* Generated by nnvm export-c: the executor plan of one model. Do not edit. */\n",
           "#include <stdint.h>\n",
           "typedef struct { uint8_t in_blob; uint8_t code; uint8_t bits; int32_t ndim; "
           "int32_t shape_off; uint64_t offset; uint64_t nbytes; const char *dtype; } "
           "nnvm_tensor_desc;\n",
           f"#define NNVM_NUM_TENSORS {len(lay.tensors)}\n",
           f"#define NNVM_NUM_STEPS {len(steps)}\n",
           f"#define NNVM_NUM_FUNCS {len(funcs)}\n",
           f"#define NNVM_NUM_STEP_ARGS {len(step_args)}\n",
           f"#define NNVM_NUM_INPUTS {len(inputs)}\n",
           f"#define NNVM_NUM_OUTPUTS {len(outputs)}\n",
           f"#define NNVM_ARENA_BYTES {lay.arena_bytes}ULL\n",
           arr("int64_t", "nnvm_shapes", lay.shapes, lambda v: f"{v}LL"),
           "static const nnvm_tensor_desc nnvm_tensors[] = {\n" + "".join(
               f"  {{{t['in_blob']}, {t['code']}, {t['bits']}, {t['ndim']}, {t['shape_off']}, "
               f"{t['offset']}ULL, {t['nbytes']}ULL, {_c_str(t['dtype'])}}},\n"
               for t in lay.tensors) + "};\n",
           arr("char *const", "nnvm_func_names", funcs, _c_str),
           "static const nnvm_step_desc nnvm_steps[] = {" + ", ".join(
               f"{{{f}, {n}, {o}}}" for f, n, o in steps) + "};\n",
           arr("int32_t", "nnvm_step_args", step_args),
           arr("int32_t", "nnvm_input_tensor", [t for _, t in inputs]),
           arr("int32_t", "nnvm_output_tensor", [t for _, t in outputs]),
           arr("char *const", "nnvm_input_names", [n for n, _ in inputs], _c_str),
           arr("char *const", "nnvm_output_names", [n for n, _ in outputs], _c_str)]
    return "".join(out), inputs, outputs


def _api_header(module, lay: _Layout, inputs, outputs) -> str:
    with open(os.path.join(_DEPLOY, "nnvm_model.h.in"), encoding="utf-8") as f:
        text = f.read()

    def describe(kind, items):
        lines = []
        for i, (n, t) in enumerate(items):
            d = lay.tensors[t]
            safe = re.sub(r"[^\x20-\x7e]|\*/", "?", n)
            lines.append(f" *   {kind} {i}: '{safe}' {d['dtype']}{d['shape']} "
                         f"({d['nbytes']} bytes)")
        return "\n".join(lines) or f" *   (no {kind}s)"

    return (text.replace("@INPUTS@", describe("input", inputs))
                .replace("@OUTPUTS@", describe("output", outputs))
                .replace("@TARGET@", re.sub(r"\*/", "?", str(module._plan.get("tvm_target",
                                                                             module.target)))))


def export_c(module, path: str, cc: str | None = None) -> dict:
    """Write ``libnnvm_model.so``, ``nnvm_model.h`` and ``example.c`` into directory ``path``.

    Args:
        module: an ``LLVMModule`` (built, or loaded from a ``.nnvm`` llvm artifact).
        path: the output directory (created if missing; the three files are overwritten).
        cc: the C compiler (default ``$CC``, ``cc``, ``gcc``).

    Returns:
        ``{"dir", "library", "library_bytes", "weights_bytes", "arena_bytes", "steps"}``.

    Raises:
        NNVMError: the module has host (NumPy) fallback steps or non-numeric tensors, or the
        C compiler failed.
    """
    from nnvm.compiler.dynamic_region import check_host_tail_free

    from .runtime.executor import LLVMModule

    check_host_tail_free(module, "nnvm export-c")
    if not isinstance(module, LLVMModule):
        raise NNVMError(format_error("nnvm export-c", "needs a module of the llvm target",
                                     "an LLVMModule", type(module).__name__,
                                     fix="Build with target='llvm' or load an llvm artifact"))
    _check_exportable(module)
    with module._lock:  # the bound params and packed weights must not change under us
        module._sync_params()
        lay = _Layout(module)
        data_h, inputs, outputs = _data_header(module, lay)
        api_h = _api_header(module, lay, inputs, outputs)
        so_bytes = module._so_bytes
        blob = bytes(lay.blob) or b"\0"
    import tvm_ffi.libinfo

    include = tvm_ffi.libinfo.find_include_path()
    cc = cc or _compiler()
    os.makedirs(path, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nnvm-export-c-") as work:
        files = {"nnvm_model_data.h": data_h.encode(), "nnvm_model.h": api_h.encode(),
                 "weights.bin": blob, "kernels.so": so_bytes}
        for name, data in files.items():
            with open(os.path.join(work, name), "wb") as f:
                f.write(data)
        asm = "".join(
            f'  .section .rodata.{sym},"a"\n  .balign {ALIGN}\n  .globl {sym}\n'
            f"  .hidden {sym}\n{sym}:\n  .incbin \"{os.path.join(work, src)}\"\n"
            f"  .globl {sym}_end\n  .hidden {sym}_end\n{sym}_end:\n"
            for sym, src in (("nnvm_blob_weights", "weights.bin"),
                             ("nnvm_blob_kernels", "kernels.so")))
        asm += '  .section .note.GNU-stack,"",%progbits\n'
        with open(os.path.join(work, "nnvm_model_blobs.S"), "w", encoding="utf-8") as f:
            f.write(asm)
        out = os.path.join(work, LIB_NAME)
        cmd = [cc, "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
               "-I", work, "-I", include, os.path.join(_DEPLOY, "nnvm_model.c"),
               os.path.join(work, "nnvm_model_blobs.S"), "-o", out,
               f"-Wl,-soname,{LIB_NAME}", "-lpthread", "-lm", "-ldl"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise NNVMError(format_error("nnvm export-c, compiling libnnvm_model.so",
                                         f"{cc} failed", "exit status 0",
                                         f"{proc.returncode}: {proc.stderr[-2000:]}",
                                         fix="Check the C compiler (set CC) and report the "
                                             "error with the model"))
        shutil.copyfile(out, os.path.join(path, LIB_NAME))
        os.chmod(os.path.join(path, LIB_NAME), 0o755)
        with open(os.path.join(path, "nnvm_model.h"), "w", encoding="utf-8") as f:
            f.write(api_h)
        shutil.copyfile(os.path.join(_DEPLOY, "example.c"), os.path.join(path, "example.c"))
    return {"dir": os.path.abspath(path), "library": os.path.join(os.path.abspath(path),
                                                                  LIB_NAME),
            "library_bytes": os.path.getsize(os.path.join(path, LIB_NAME)),
            "weights_bytes": len(lay.blob), "arena_bytes": lay.arena_bytes,
            "steps": len(module._plan["steps"])}


# -- CLI ------------------------------------------------------------------------------------------
def add_cli_commands(subparsers) -> None:
    """``nnvm export-c MODEL.nnvm -o DIR`` (wired in through the llvm plugin's CLI hook)."""
    import argparse

    p = subparsers.add_parser(
        "export-c", help="export an llvm artifact as a standalone C library",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write DIR/libnnvm_model.so (kernels, C executor and weights; needs only "
                    "libc, libm and pthreads), DIR/nnvm_model.h and DIR/example.c. See "
                    "docs/deploy.md.",
        epilog="example:\n  nnvm export-c model.nnvm -o out\n  cd out && cc example.c -I. "
               "-L. -lnnvm_model -Wl,-rpath,'$ORIGIN' -o example")
    p.add_argument("model", help="a .nnvm artifact compiled for target llvm")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    p.set_defaults(func=_cmd_export_c)


def _cmd_export_c(args) -> int:
    import nnvm

    lib = nnvm.runtime.load(args.model)
    info = export_c(lib, args.output)
    print(f"exported {args.model} -> {info['library']} ({info['library_bytes']} bytes: "
          f"{info['steps']} kernels, {info['weights_bytes']} bytes of weights; "
          f"{info['arena_bytes']} bytes of activations per model instance)")
    return 0
