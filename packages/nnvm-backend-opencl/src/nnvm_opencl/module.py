"""The OpenCL runtime module: one program, one arena buffer, kernels launched in order.

Every kernel's arguments are fixed at load time (the arena and each tensor's planned element
offset), so ``run`` copies the inputs into their arena slots, enqueues the kernels (and runs
host fallback steps with their NumPy reference kernels, copying only their inputs and outputs
across), then reads the outputs back.
"""

from __future__ import annotations

import json
import os

import numpy as np

from nnvm_codegen_c.arena import host_only
from nnvm_codegen_c.builder import GraphInfo
from nnvm_codegen_c.lower import Step, step_stats
from nnvm_codegen_c.renderer import Kernel, TensorArg
from nnvm.errors import ExecutionError, NNVMError, format_error
from nnvm.interpreter import _np_dtype, run_reference
from nnvm.runtime.module import Module

from . import device as devices
from .program import build_program, fetch_binary, program_from_binary

PLAN_VERSION = 1


def plan_to_json(steps: list[Step], offsets: dict[int, int], arena: int, act: int) -> dict:
    return {"version": PLAN_VERSION, "arena_bytes": arena, "activation_bytes": act,
            "offsets": {str(e): o for e, o in sorted(offsets.items())},
            "steps": [{"kind": s.kind, "root": s.root, "members": s.members,
                       "outputs": s.outputs, "inputs": s.inputs, "reason": s.reason,
                       "kernels": [k.to_json() for k in s.kernels]} for s in steps]}


def plan_from_json(plan: dict) -> tuple[list[Step], dict[int, int], int, int]:
    if plan.get("version") != PLAN_VERSION:
        raise NNVMError(f"opencl artifact: plan version {plan.get('version')!r}; this backend "
                        f"reads version {PLAN_VERSION}. Re-export the model")
    steps = []
    for s in plan["steps"]:
        ks = [Kernel(k["name"], "", [TensorArg(**a) for a in k["args"]],
                     tuple(k["global_size"]),
                     None if k["local_size"] is None else tuple(k["local_size"]), k["group"])
              for k in s["kernels"]]
        steps.append(Step(s["kind"], s["root"], s["members"], ks, s["outputs"], s["inputs"],
                          s["reason"]))
    return (steps, {int(e): o for e, o in plan["offsets"].items()}, plan["arena_bytes"],
            plan["activation_bytes"])


class OpenCLModule(Module):
    """Runtime module of the ``opencl`` target.

    Thread safety: ``run(**inputs)`` may be called from many threads; each call holds the
    module's lock (``Module._lock``) from binding its inputs to reading its outputs back. A
    lock, not per-call state, because every kernel's arguments are fixed at load time to
    one device arena and the module has one command queue: concurrent calls would write
    their inputs into the same arena slots (a per-call arena would mean re-binding every
    kernel's arguments per call and one arena of device memory per concurrent call).
    """

    def __init__(self, graph, params, target: str, steps: list[Step], offsets: dict[int, int],
                 arena_bytes: int, activation_bytes: int, source: str,
                 platform: str | None = None, device: str | None = None,
                 binary: bytes | None = None):
        super().__init__(graph, params, target)
        import pyopencl as cl

        self._cl = cl
        self.steps, self.offsets, self.source = steps, offsets, source
        self.arena_bytes, self._act_bytes = arena_bytes, activation_bytes
        self.platform, self.device = devices.select(platform, device)
        self.ctx = devices.context(self.device)
        self.queue = cl.CommandQueue(self.ctx)
        if os.environ.get("NNVM_OPENCL_DUMP"):
            print(source)
        if not any(s.kernels for s in steps):
            # every step runs on the host (or there are none): nothing to compile
            self.program, self.from_cache, self.binary = None, None, b""
        elif binary is not None:
            self.program, self.from_cache = program_from_binary(self.ctx, self.device, binary,
                                                                source)
            self.binary = binary
        else:
            self.program, self.from_cache, self.binary = build_program(self.ctx, self.device,
                                                                       source)
        self.info = GraphInfo(graph)
        self._alloc_arena()
        self._launches = []
        for s in steps:
            for k in s.kernels:
                self._launches.append(self._bind_kernel(k))
        self._uploaded: dict[str, int] = {}

    # -- setup -------------------------------------------------------------------------------
    def _alloc_arena(self) -> None:
        cl, dev = self._cl, self.device
        limit = min(int(dev.max_mem_alloc_size), int(dev.global_mem_size))
        if self.arena_bytes > limit:
            raise ExecutionError(format_error(
                f"opencl device '{dev.name.strip()}'", "out of device memory for the model's "
                "arena", f"at most {limit} bytes in one buffer", f"{self.arena_bytes} bytes",
                fix="Use a smaller batch or input size, or another device (-device=...)"))
        try:
            self.arena = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, self.arena_bytes)
        except cl.Error as exc:
            raise ExecutionError(f"opencl device '{dev.name.strip()}': cannot allocate the "
                                 f"{self.arena_bytes}-byte arena ({exc}); out of device "
                                 f"memory -> use a smaller batch or another device") from None

    def _bind_kernel(self, k: Kernel):
        kern = getattr(self.program, k.name)
        args = []
        for a in k.args:
            item = _np_dtype(a.dtype).itemsize
            args += [self.arena, np.int32(self.offsets[a.entry] // item)]
        kern.set_args(*args)
        gs = tuple(k.global_size)
        ls = None if k.local_size is None else tuple(k.local_size)[:len(gs)]
        return kern, gs, ls

    # -- execution ---------------------------------------------------------------------------
    def _write(self, entry: int, value) -> None:
        if host_only(self.info.dtypes[entry]):  # strings: no arena slot, kept on the host
            self._host[entry] = np.asarray(value, dtype=object).reshape(
                self.info.shapes[entry])
            return
        arr = np.ascontiguousarray(value, dtype=_np_dtype(self.info.dtypes[entry]))
        if arr.nbytes:
            self._cl.enqueue_copy(self.queue, self.arena, arr,
                                  dst_offset=self.offsets[entry], is_blocking=False)
            self._keep.append(arr)

    def _read(self, entry: int, blocking: bool = True) -> np.ndarray:
        """``entry`` copied to the host; with ``blocking=False`` valid only after the
        caller's ``queue.finish()`` (several reads then pay one wait, not one each: a
        blocking read is a ~30 us round trip to PoCL's worker threads)."""
        if host_only(self.info.dtypes[entry]):
            return self._host[entry].copy()
        arr = np.empty(self.info.shapes[entry], dtype=_np_dtype(self.info.dtypes[entry]))
        if arr.nbytes:
            self._cl.enqueue_copy(self.queue, arr, self.arena, src_offset=self.offsets[entry],
                                  is_blocking=blocking)
        return arr

    def _execute(self, feed):
        cl = self._cl
        idx = self.info.idx
        self._keep = []
        self._host: dict[int, np.ndarray] = {}
        self._run_feed = feed
        for nid in idx.input_nodes:
            name = idx.nodes[nid].name
            e = self.info.entry(nid, 0)
            # a param stays uploaded across runs; host-only values are set again every run
            if name in self.params and not host_only(self.info.dtypes[e]):
                if self._uploaded.get(name) == id(self.params[name]):
                    continue
                self._uploaded[name] = id(self.params[name])
            self._write(e, feed[name])
        li = 0
        try:
            for step in self.steps:
                if step.kind == "host":
                    self._run_host(step)
                    continue
                for _ in step.kernels:
                    kern, gs, ls = self._launches[li]
                    li += 1
                    cl.enqueue_nd_range_kernel(self.queue, kern, gs, ls)
            outs = []
            for e in idx.output_entries:
                nid = self.info.entry_node[e]
                if idx.nodes[nid].op is None:
                    outs.append(np.asarray(feed[idx.nodes[nid].name]).copy())
                else:
                    outs.append(self._read(e, blocking=False))
            self.queue.finish()
        except cl.Error as exc:
            raise ExecutionError(f"opencl: a kernel launch or copy failed ({exc}); if it says "
                                 f"OUT_OF_RESOURCES or MEM_OBJECT_ALLOCATION_FAILURE the "
                                 f"device is out of memory") from None
        finally:
            self._keep, self._host, self._run_feed = [], {}, {}
        return outs

    def _run_host(self, step: Step) -> None:
        node = self.info.idx.nodes[step.root]
        args = [self._host_value(e) for e in self.info.inputs(step.root)]
        self.queue.finish()  # the reads above were enqueued without waiting
        res = run_reference(node, *args)
        for e, r in zip(step.outputs, res):
            self._write(e, r)

    def _host_value(self, entry: int) -> np.ndarray:
        """A host step's input: graph inputs and params straight from the host (they are
        unchanged on the device; each device read is a blocking round trip), others read."""
        node = self.info.idx.nodes[self.info.entry_node[entry]]
        if node.op is None and node.name in self._run_feed:
            return np.asarray(self._run_feed[node.name],
                              dtype=_np_dtype(self.info.dtypes[entry])).reshape(
                self.info.shapes[entry])
        return self._read(entry, blocking=False)

    # -- stats and export --------------------------------------------------------------------
    def _num_kernels(self) -> int:
        return len(self._launches)

    def stats(self) -> dict:
        out = super().stats()
        out.update(step_stats(self.info, self.steps, self._act_bytes, self.arena_bytes))
        out.update({
            "device": f"{self.platform.name.strip()} / {self.device.name.strip()}",
            "program_from_cache": self.from_cache,
        })
        return out

    def _artifact_members(self) -> dict[str, bytes]:
        plan = plan_to_json(self.steps, self.offsets, self.arena_bytes, self._act_bytes)
        plan["device"] = {"platform": self.platform.name.strip(),
                          "device": self.device.name.strip()}
        members = {"kernels.cl": self.source.encode("utf-8"),
                   "plan.json": json.dumps(plan, sort_keys=True).encode("utf-8")}
        if self.binary is None:
            try:
                self.binary = fetch_binary(self.program)
            except self._cl.Error:  # a driver without binaries: the source is in the artifact
                self.binary = b""
        if self.binary:
            from .program import cache_key

            members[f"kernels.{cache_key(self.source, self.device)[:16]}.bin"] = \
                bytes(self.binary)
        return members
