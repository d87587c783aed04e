"""Build: groups -> TE -> scheduled TIR -> ONE ``tvm.compile`` -> lib.so + executor plan.

Each group's key is computed from the graph alone (ops, attributes, wiring, shapes, dtypes,
packing, target), so a cached kernel skips TE and scheduling, and a cached library skips
LLVM too. The library always links ``threadpool.c`` (see there), which lets it run with
apache-tvm-ffi alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import tvm
import tvm.s_tir as s_tir
from tvm import te
from tvm.tirx import IndexMap

from nnvm import progress
from nnvm.errors import NNVMError, format_error
from nnvm.op import OpPattern

from ..runtime.executor import PLAN_FORMAT, PLAN_VERSION, LLVMModule, graph_fingerprint, \
    load_library
from ..tuning.records import best_records, cpu_model, knobs_key, log_paths, workload_key
from . import cache, fastmath, gemm, lowering, ml_linear, ml_prep, ml_trees, recurrent, tconv, \
    upsample
from .groups import VIEW_OPS, VIEW_READERS, Group, group_inputs, group_outputs, partition, view_source
from .schedules import ScheduleInfo, schedule
from .target import num_threads, tvm_target, vector_lanes

upsample.install()
recurrent.install()
ml_trees.install()
ml_linear.install()
ml_prep.install()
_THREADPOOL_C = os.path.join(os.path.dirname(__file__), "threadpool.c")


class _GroupLowering:
    """Everything about one group the plan and the key need, before any TE is built."""

    def __init__(self, graph, group: Group, params: dict, lanes: int):
        idx = graph.index
        self.graph, self.group = graph, group
        rptr = idx.entry_rptr
        shapes, dtypes = graph.attrs["shape"], graph.attrs["dtype"]
        self.inputs = group_inputs(graph, group)
        self.outputs = group_outputs(graph, group)
        var_name = {rptr[n]: idx.nodes[n].name for n in idx.input_nodes}
        # packing: (entry) -> (layout, block) when a param feeds a packable slot
        self.packed: dict[int, tuple[str, int]] = {}
        self.node_packed: dict[int, dict[int, tuple[str, int]]] = {}
        for nid in group.nodes:
            node = idx.nodes[nid]
            rule = lowering.lookup(node.op.name)
            if rule is None or rule.pack is None:
                continue
            ins = [shapes[rptr[i] + k] for i, k, _ in idx.inputs[nid]]
            want = rule.pack(node.attrs, ins, lowering.LowerContext(lanes))
            for slot, spec in want.items():
                i, k, _ = idx.inputs[nid][slot]
                e = rptr[i] + k
                if var_name.get(e) in params and self.packed.get(e, spec) == spec:
                    self.packed[e] = spec
                    self.node_packed.setdefault(nid, {})[slot] = spec
        self.var_name = var_name
        # scalar float params are compiled in as constants: x ** 2 becomes x * x, x / c a
        # multiply, and no load; the plan records them so rebinding one is refused
        self.consts: dict[int, float] = {}
        for e in self.inputs:
            value = params.get(var_name.get(e)) if var_name.get(e) in params else None
            if value is not None and value.size == 1 and value.dtype.kind == "f" \
                    and np.isfinite(value).all():
                self.consts[e] = float(value.reshape(-1)[0])
        self.viewed = self._viewed_inputs()
        sig = {"nodes": [], "inputs": [], "outputs": []}
        pos = {e: n for n, e in enumerate(self.inputs)}
        local = {nid: n for n, nid in enumerate(group.nodes)}
        for nid in group.nodes:
            node = idx.nodes[nid]
            refs = []
            for i, k, _ in idx.inputs[nid]:
                e = rptr[i] + k
                refs.append(["in", pos[e]] if i not in local else ["node", local[i], k])
            sig["nodes"].append([node.op.name, sorted((k, repr(v)) for k, v in
                                                      node.attrs.items()), refs])
        for e in self.inputs:
            sig["inputs"].append([list(shapes[e]), dtypes[e], self.packed.get(e),
                                  self.consts.get(e)])
        for e in self.outputs:
            sig["outputs"].append([list(shapes[e]), dtypes[e]])
        master = idx.nodes[group.master]
        self.kind = lowering.kind_of(master)
        if master.op.name == "matmul":
            self.kind = gemm.kind_of(master, group.master in self.node_packed)
        elif master.op.name == "conv2d" and group.master in self.node_packed:
            self.kind = lowering.packed_conv_kind(master, self.kind)
        elif master.op.name == "conv_transpose":
            self.kind = tconv.kind_of(master, [shapes[rptr[i] + k] for i, k, _ in
                                               idx.inputs[group.master]]) or self.kind
        sig["kind"] = self.kind
        self.signature = json.dumps(sig, sort_keys=True, default=str)
        ops = [idx.nodes[n].op.name.strip("_") for n in group.nodes]
        self.ops = ops
        self.pretty = "_".join(ops)[:48]

    def _viewed_inputs(self) -> dict[int, int]:
        """Inputs read only through a reshape that adds or drops size-1 axes (the input of
        a 1-D conv folded into its conv2d, ``groups._fuse_input_views``): entry -> the
        reshape's node. The kernel is built and scheduled over the reshaped shape, so the
        templates find the 4-D image they look for, then ``unview`` gives the argument
        back the input's own shape."""
        idx, shapes = self.graph.index, self.graph.attrs["shape"]
        rptr = idx.entry_rptr
        reads: dict[int, list[int]] = {}
        for nid in self.group.nodes:
            for i, k, _ in idx.inputs[nid]:
                reads.setdefault(rptr[i] + k, []).append(nid)
        viewed: dict[int, int] = {}
        if idx.nodes[self.group.master].op.name not in VIEW_READERS:
            return viewed
        for e in self.inputs:
            nid = reads[e][0]
            if len(reads[e]) == 1 and nid != self.group.root and e not in self.packed \
                    and e not in self.consts and idx.nodes[nid].op.name in VIEW_OPS \
                    and len(idx.inputs[nid]) == 1 and lowering.unit_axes_map(
                        tuple(shapes[e]), tuple(shapes[rptr[nid]])) is not None:
                viewed[e] = nid
        return viewed

    def unview(self, func):
        """Give each viewed input's parameter its own shape back (a layout transform of
        the parameter buffer: the loads index it without the size-1 axes)."""
        if not self.viewed:
            return func
        shapes = self.graph.attrs["shape"]
        rptr = self.graph.index.entry_rptr
        sch = s_tir.Schedule(func)
        blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
        for n, e in enumerate(self.inputs):
            if e not in self.viewed:
                continue
            axes = lowering.unit_axes_map(tuple(shapes[e]),
                                          tuple(shapes[rptr[self.viewed[e]]]))
            for b in blocks:
                slot = next((k for k, r in enumerate(sch.get(b).reads)
                             if r.source.name == f"in{n}"), None)
                if slot is not None:
                    sch.transform_layout(b, ("read", slot), IndexMap.from_func(
                        _drop_unit_axes(axes), ndim=len(shapes[rptr[self.viewed[e]]]),
                        index_dtype="int32"))
                    break
            else:
                raise NNVMError(f"llvm build: no block of '{self.pretty}' reads in{n}")
        func = sch.mod["main"]
        for n, e in enumerate(self.inputs):
            if e in self.viewed and tuple(int(d) for d in func.params[n].shape) != \
                    tuple(shapes[e]):
                raise NNVMError(f"llvm build: in{n} of '{self.pretty}' kept its view's shape")
        return func

    def scheduled(self, lanes: int, info: ScheduleInfo):
        """The group's scheduled PrimFunc; where a viewed input's layout cannot be given
        back, the one scheduled with its reshape inlined instead (the same values)."""
        if self.viewed:
            try:
                return self.unview(schedule(self.primfunc(lanes), info))
            except Exception:  # noqa: BLE001 - a TVM error: this layout cannot be inverted
                info.applied = False
        return schedule(self.primfunc(lanes, views=False), info)

    def arg_refs(self) -> list[dict]:
        refs = []
        for e in self.inputs:
            if e in self.packed:
                layout, block = self.packed[e]
                refs.append({"packed": f"{self.var_name[e]}@{layout}{block}"})
            else:
                refs.append({"entry": e})
        return refs + [{"entry": e} for e in self.outputs]

    def schedule_info(self, lanes: int, knobs: dict | None = None) -> ScheduleInfo:
        """What the template gets: the packed weight block binds its tile (a register tile
        wider than the packed panel, e.g. 16 columns over RegNet's 8-channel groups, makes
        every weight load a gather), plus the tuned knobs."""
        blocks = {lay: b for lay, b in self.node_packed.get(self.group.master, {}).values()}
        return ScheduleInfo(self.kind, lanes, dense_block=blocks.get("dense") or
                            blocks.get("matmul"), conv_block=blocks.get("conv2d"),
                            knobs=dict(knobs or {}))

    def primfunc(self, lanes: int, views: bool = True):
        """Build the group's TE and return the unscheduled PrimFunc (with ``views``, each
        viewed input as a parameter of its reshape's shape: see ``_viewed_inputs``)."""
        graph, idx = self.graph, self.graph.index
        rptr = idx.entry_rptr
        shapes, dtypes = graph.attrs["shape"], graph.attrs["dtype"]
        tensors: dict[int, te.Tensor] = {}
        placeholders = []
        for n, e in enumerate(self.inputs):
            shape = shapes[rptr[self.viewed[e]]] if views and e in self.viewed else shapes[e]
            if e in self.packed:
                layout, block = self.packed[e]
                shape = lowering.packed_input_shape(layout, shape, block)
            t = te.placeholder(tuple(int(d) for d in shape), dtype=dtypes[e], name=f"in{n}")
            placeholders.append(t)
            if e in self.consts:  # the argument stays (the plan's wiring), unread
                t = te.compute(t.shape, _constant(self.consts[e], dtypes[e]), name=f"const{n}")
            tensors[e] = t
        folded = {nid for nid in self.viewed.values()} if views else set()
        for pos, nid in enumerate(self.group.nodes):
            node = idx.nodes[nid]
            ins = [tensors[rptr[i] + k] for i, k, _ in idx.inputs[nid]]
            if nid in folded:  # the placeholder has the reshaped shape already
                tensors[rptr[nid]] = ins[0]
                continue
            outs = [(tuple(int(d) for d in shapes[e]), dtypes[e])
                    for e in range(rptr[nid], rptr[nid + 1])]
            ctx = lowering.LowerContext(lanes, self.node_packed.get(nid, {}),
                                        f"{node.op.name.strip('_')}_{pos}")
            res = lowering.lookup(node.op.name).compute(dict(node.attrs), ins, outs, ctx)
            res = list(res) if isinstance(res, (list, tuple)) else [res]
            for k, t in enumerate(res):
                tensors[rptr[nid] + k] = t
        outs = [tensors[e] for e in self.outputs]
        for e, t in zip(self.outputs, outs):
            if tuple(int(d) for d in t.shape) != tuple(shapes[e]) or t.dtype != dtypes[e]:
                raise NNVMError(format_error(
                    f"llvm lowering of group '{self.pretty}'", "rule output disagrees with "
                    "shape/type inference", (tuple(shapes[e]), dtypes[e]),
                    (tuple(int(d) for d in t.shape), t.dtype)))
        # an output that is also an input or repeated needs its own copy stage
        seen = set(placeholders)
        final = []
        for n, t in enumerate(outs):
            if t in seen:
                t = te.compute(t.shape, lambda *i, t=t: t[i], name=f"out_copy{n}")
            seen.add(t)
            final.append(t)
        return te.create_prim_func(placeholders + final)


def _drop_unit_axes(axes: list):
    """An index map from the reshaped indices to the input's (``lowering.unit_axes_map``):
    a closure, as ``IndexMap.from_func`` passes a variable to every named parameter."""
    zero = tvm.tirx.const(0, "int32")
    return lambda *i: [i[d] if d is not None else zero for d in axes]


def _constant(value: float, dtype: str):
    """An fcompute returning ``value`` (TE refuses keyword defaults in fcompute)."""
    const = tvm.tirx.const(value, dtype)
    return lambda *_: const


def _threadpool_object(workdir: str) -> str:
    """Compile threadpool.c once per source version; the object is kept in the kernel cache
    as a verified entry like any library (a truncated or replaced object is discarded and
    rebuilt, never linked), and written into this build's private ``workdir``."""
    import tvm_ffi.libinfo

    with open(_THREADPOOL_C, "rb") as f:
        src = f.read()
    key = "threadpool-" + cache.digest("threadpool" + src.decode())
    path = os.path.join(workdir, f"{key}.o")
    data = cache.get_lib(key)
    if data is None:
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise NNVMError("llvm build: no C compiler found (needed to link the kernel "
                            "library; TVM's export_library needs one too). Install gcc or "
                            "set CC")
        cmd = [cc, "-O2", "-fPIC", "-c", _THREADPOOL_C, "-o", path,
               "-I", tvm_ffi.libinfo.find_include_path()]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise NNVMError(f"llvm build: compiling threadpool.c failed:\n"
                            f"{proc.stderr[-2000:]}")
        with open(path, "rb") as f:
            cache.put_lib(key, f.read())
        return path
    with open(path, "wb") as f:
        f.write(data)
    return path


def _compile(funcs: dict, tgt, workdir: str) -> tuple[bytes, list[str]]:
    """One ``tvm.compile`` for every kernel; a kernel whose schedule fails to compile is
    replaced by its unscheduled loop nest (named in the returned list).

    ``funcs`` maps a function name to ``(scheduled PrimFunc, make_plain)``, where
    ``make_plain()`` rebuilds the unscheduled PrimFunc from TE.
    """
    with fastmath.enabled():
        return _compile_all(funcs, tgt, workdir)


def _compile_all(funcs: dict, tgt, workdir: str) -> tuple[bytes, list[str]]:
    fallbacks = []
    mod = tvm.IRModule({name: f for name, (f, _) in funcs.items()})
    try:
        lib = tvm.compile(mod, target=tgt)
    except Exception:  # noqa: BLE001 - find the culprit(s), then build without them
        for name, (f, make_plain) in list(funcs.items()):
            try:
                tvm.compile(tvm.IRModule({name: f}), target=tgt)
            except Exception:  # noqa: BLE001
                plain = make_plain().with_attr("global_symbol", name)
                _compile_plain(name, plain, tgt)
                funcs[name] = (plain, make_plain)
                fallbacks.append(name)
        lib = tvm.compile(tvm.IRModule({n: f for n, (f, _) in funcs.items()}), target=tgt)
    so = os.path.join(workdir, "lib.so")
    lib.export_library(so, addons=[_threadpool_object(workdir)])
    with open(so, "rb") as f:
        return f.read(), fallbacks


def _compile_plain(name: str, func, tgt) -> None:
    """Compile a kernel's unscheduled loop nest alone; a failure here is no schedule's fault
    but an op applied to a dtype TVM cannot generate code for (sqrt of int64, less on bool:
    models onnx.checker rejects, imported with check=False; found by scripts/fuzz_onnx.py
    --target llvm), reported as an NNVMError naming the kernel instead of a raw TVM error."""
    try:
        tvm.compile(tvm.IRModule({name: func}), target=tgt)
    except Exception as exc:  # noqa: BLE001 - TVM's InternalError and friends
        first = next((ln.strip() for ln in str(exc).splitlines() if "Check failed" in ln),
                     str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        raise NNVMError(format_error(
            f"llvm build, kernel '{name}'", "cannot be compiled by TVM", got=first[:300],
            fix="The model applies an op to a dtype its ONNX schema does not allow (for "
                "example Sqrt of int64 or Less on bool; onnx.checker reports it), which "
                "only the reference target runs: fix the model or use target='reference'"
        )) from None


def build_module(graph, params, target, config) -> LLVMModule:
    """Compile an optimised, shape-inferred graph for ``target`` (an llvm ``Target``)."""
    t0 = time.perf_counter()
    tgt = tvm_target(target)
    with tgt:  # the current target while lowering: rules read its CPU features (VNNI)
        return _build_module(graph, params, target, config, tgt, t0)


def _build_module(graph, params, target, config, tgt, t0) -> LLVMModule:
    lanes = vector_lanes(tgt)
    idx = graph.index
    rptr = idx.entry_rptr
    shapes, dtypes = graph.attrs["shape"], graph.attrs["dtype"]
    params = {k: np.asarray(v) for k, v in params.items()}
    groups = partition(graph)
    storage_id = graph.attrs.get("storage_id")
    steps, entries, packed, funcs, keys, baked = [], {}, {}, {}, [], {}
    hits0 = dict(cache.counters)
    tuned = tuned_records(tgt, target, config)
    applied: list[dict] = []
    unsupported: dict[str, str] = {}
    access: list[tuple[list[int], list[int]]] = []  # (entries read, entries written) per step
    views: dict[int, int] = {}  # reshape output entry -> the entry it views (no kernel)

    def entry(e: int, private: bool = False) -> None:
        sid = -1 if storage_id is None or private else int(storage_id[e])
        prev = entries.get(e)
        if prev is None or private:
            entries[e] = {"shape": [int(d) for d in shapes[e]], "dtype": dtypes[e],
                          "storage": sid}

    for nid in idx.input_nodes:
        entry(rptr[nid])
    for g in progress.track(groups, "lowering kernels for llvm", unit="kernels"):
        if not g.lowered:
            node = idx.nodes[g.root]
            unsupported.setdefault(node.op.name, g.reason)
            ins = [rptr[i] + k for i, k, _ in idx.inputs[g.root]]
            outs = group_outputs(graph, g)
            for e in ins:
                entry(e)
            for e in outs:
                entry(e)
            steps.append({"kind": "reference", "node": g.root, "inputs": ins, "outputs": outs})
            access.append((ins, outs))
            continue
        source = view_source(graph, g)
        if source is not None:
            views[rptr[g.root]] = source
            entry(rptr[g.root])
            continue
        gl = _GroupLowering(graph, g, params, lanes)
        record = tuned.get(workload_key(gl.signature))
        knobs = dict(record["knobs"]) if record else {}
        key = cache.digest(f"{tgt}|{gl.signature}" + (f"|knobs={knobs_key(knobs)}" if knobs
                                                      else ""))
        name = f"nnvm_{gl.pretty}_{key[:10]}"
        if name not in funcs:
            func = cache.get_kernel(key)
            if func is None:
                info = gl.schedule_info(lanes, knobs)
                func = gl.scheduled(lanes, info)
                if knobs and not info.applied:
                    # a record whose knobs the template now refuses (logged before the
                    # template changed): the heuristic's kernel, not the plain loop nest
                    func = gl.scheduled(lanes, gl.schedule_info(lanes))
                cache.put_kernel(key, func)
            if record:
                applied.append({"kernel": name, "workload": record["workload"], "knobs": knobs,
                                "seconds": record["seconds"], "threads": record.get("threads")})
            funcs[name] = (func.with_attr("global_symbol", name),
                           lambda gl=gl: gl.primfunc(lanes, views=False))
            keys.append(key)
        for e in gl.inputs:
            entry(e)
        hazard = any(OpPattern(idx.nodes[n].op.get_attr("TOpPattern", OpPattern.OPAQUE))
                     >= OpPattern.INJECTIVE for n in g.nodes)
        in_sids = {storage_id[e] for e in gl.inputs} if storage_id is not None else set()
        for e in gl.outputs:
            # an output may share an input's storage only when every element reads its own
            # index: never after injective ops, and never from a broadcast input of another
            # shape (T5's RMS norm read its (1, 32, 1) variance from storage its (1, 32, 128)
            # output was overwriting: NaN from sqrt of clobbered values)
            reshaped = {storage_id[i] for i in gl.inputs
                        if list(shapes[i]) != list(shapes[e])} if storage_id is not None \
                else set()
            entry(e, private=storage_id is not None and (
                (hazard and storage_id[e] in in_sids) or storage_id[e] in reshaped))
        for e, value in gl.consts.items():
            baked[gl.var_name[e]] = value
        for e, (layout, block) in gl.packed.items():
            packed[f"{gl.var_name[e]}@{layout}{block}"] = {
                "param": gl.var_name[e], "layout": layout, "block": block}
        steps.append({"kind": "kernel", "func": name, "args": gl.arg_refs(),
                      "group": gl.ops, "nodes": list(g.nodes)})  # nodes: for the profiler
        access.append((gl.inputs, gl.outputs))
    for e in idx.output_entries:
        entry(e)
    _isolate_clobbered(access, entries, views)
    _alias_views(views, entries)
    t_lower = time.perf_counter() - t0
    lib_key = cache.digest(f"{tgt}|" + "|".join(sorted(keys)))
    so_bytes = cache.get_lib(lib_key) if funcs else None
    lib_hit = so_bytes is not None  # (the counters also count the thread-pool object)
    sched_fallbacks: list[str] = []
    if so_bytes is None:
        with tempfile.TemporaryDirectory(prefix="nnvm-llvm-") as work:
            if not funcs:  # a graph of fallbacks only still needs a library (the pool)
                funcs["nnvm_empty"] = (_empty_func().with_attr("global_symbol", "nnvm_empty"),
                                       _empty_func)
            with progress.step(f"compiling {len(funcs)} kernels with LLVM"):
                so_bytes, sched_fallbacks = _compile(funcs, tgt, work)
        if not sched_fallbacks:
            cache.put_lib(lib_key, so_bytes)
    plan = {
        "format": PLAN_FORMAT, "version": PLAN_VERSION, "graph": graph_fingerprint(graph),
        "steps": steps, "entries": {str(e): v for e, v in sorted(entries.items())},
        "packed": packed, "baked": baked, "num_threads": num_threads(target, config.extra),
        "tvm_target": str(tgt),
    }
    if applied:  # shipped in the artifact (executor.json) with the kernels they shaped
        plan["tuning"] = {"tuned": len(applied), "records": applied}
    hits = {k: cache.counters[k] - hits0[k] for k in cache.counters}
    info = {
        "compile_seconds": round(time.perf_counter() - t0, 4),
        "lowering_seconds": round(t_lower, 4),
        "kernel_cache_hits": hits["kernel_hits"], "lib_cache_hit": lib_hit,
        "unsupported_ops": unsupported, "schedule_fallbacks": sched_fallbacks,
        "tvm_target": str(tgt), "tuning": {"tuned": len(applied), "records": applied},
    }
    lib = load_library(so_bytes)
    return LLVMModule(graph, params, str(target), lib, so_bytes, plan, build_info=info)


def tuned_records(tgt, target, config) -> dict[str, dict]:
    """The best tuning record per workload for this target and CPU, from the logs named by
    ``tune_log=`` / ``NNVM_TUNE_LOG`` / the default log (see ``nnvm_llvm.tuning.records``)."""
    paths = log_paths(config.extra.get("tune_log"))
    if not paths:
        return {}
    threads = num_threads(target, config.extra) or \
        int(os.environ.get("TVM_NUM_THREADS") or 0) or os.cpu_count() or 1
    return best_records(paths, str(tgt), cpu_model(), threads)


def kernel_lowerings(graph, params, lanes: int, tgt=None) -> list[_GroupLowering]:
    """One lowering per distinct compiled kernel of an optimised graph, in graph order
    (what ``nnvm tune`` measures: the same groups and signatures ``build_module`` makes,
    given its TVM target ``tgt``: the weight packing depends on the CPU's features)."""
    params = {k: np.asarray(v) for k, v in params.items()}
    seen, out = set(), []
    with tgt if tgt is not None else contextlib.nullcontext():
        for g in partition(graph):
            if not g.lowered or view_source(graph, g) is not None:
                continue
            gl = _GroupLowering(graph, g, params, lanes)
            if gl.signature not in seen:
                seen.add(gl.signature)
                out.append(gl)
    return out


def _view_source(views: dict[int, int], e: int) -> int:
    """The entry a chain of views (``views``: output -> what it views) starts from."""
    while e in views:
        e = views[e]
    return e


def _isolate_clobbered(access, entries, views) -> None:
    """Give an entry its own buffer when another step writes its shared storage between the
    entry's producer and a reader.

    PlanMemory shares storage by node order; a fused group runs all its members at its
    root, so a member's input can stay live longer than the plan assumed (and a member's
    output is written later). Such entries leave the shared pool. A view and its source
    are one buffer (``views``), written once by the source's producer.
    """
    writes: dict[int, list[tuple[int, int]]] = {}
    produced: dict[int, int] = {}
    for pos, (_, outs) in enumerate(access):
        for e in outs:
            produced[e] = pos
            sid = entries[e]["storage"]
            if sid >= 0:
                writes.setdefault(sid, []).append((pos, e))
    for pos, (ins, _) in enumerate(access):
        for e in ins:
            sid = entries.get(e, {}).get("storage", -1)
            if sid < 0:
                continue
            src = _view_source(views, e)
            start = produced.get(src, -1)
            if any(start < q < pos and other != src for q, other in writes.get(sid, ())):
                entries[e]["storage"] = -1


def _alias_views(views: dict[int, int], entries: dict) -> None:
    """Put each reshape output in its source's buffer. PlanMemory shares one storage
    between a reshape's input and output already (an identity op), sized and kept live for
    both; a chain it did not share, or that ``_isolate_clobbered`` took out of the pool,
    gets a storage of its own (a fresh id no planned entry uses), so no kernel can
    overwrite the source while a view of it is still to be read."""
    chains: dict[int, list[int]] = {}
    for out in views:
        chains.setdefault(_view_source(views, out), []).append(out)
    fresh = max([info["storage"] for info in entries.values()] + [-1]) + 1
    for src, outs in chains.items():
        sids = {entries[e]["storage"] for e in [src] + outs}
        if len(sids) == 1 and min(sids) >= 0:
            continue
        for e in [src] + outs:
            entries[e]["storage"] = fresh
        fresh += 1


def _empty_func():
    a = te.placeholder((1,), name="a")
    return te.create_prim_func([a, te.compute((1,), lambda i: a[i], name="b")])
