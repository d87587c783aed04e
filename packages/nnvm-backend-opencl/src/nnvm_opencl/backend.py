"""The ``opencl`` Backend record: lower -> plan the arena -> one program -> runtime module.

Importing this module does not import pyopencl (``plugin.py`` imports it at discovery).
"""

from __future__ import annotations

from nnvm.errors import NNVMError, format_error

from . import device as devices

#: ops always run on the host: graph plumbing and ops with host-side semantics.
HOST_OPS = frozenset({"device_copy", "_assign"})
#: ops whose output is their first input's bytes unchanged (row-major reshapes)
RESHAPES = frozenset({"reshape", "flatten", "squeeze", "expand_dims", "reshape_like"})


class OpenCLBackend:
    """Backend record of the ``opencl`` target (OpenCL C through PyOpenCL)."""

    name = "opencl"
    description = "generated OpenCL C kernels through PyOpenCL (PoCL on CPU)"
    priority = 20
    options = {"platform": "platform name substring or index",
               "device": "device name substring or index",
               "kernels": "cpu | portable: GEMM/conv kernel family (default: by device type; "
                          "cpu = register-blocked vectors, portable = local-memory tiles)"}

    def is_available(self) -> str | None:
        return devices.unavailable_reason()

    def build(self, graph, params, target, config):
        from nnvm_codegen_c.builder import GraphInfo
        from nnvm_codegen_c.lower import lower_graph

        from .module import OpenCLModule
        from .plan import GUARD_BYTES, plan_arena
        from .renderer import OpenCLRenderer

        platform, device = target.get("platform"), target.get("device")
        _, dev = devices.select(platform, device)
        limits = devices.limits(dev)
        limits["overread_guard_bytes"] = GUARD_BYTES
        family = target.get("kernels")
        if family not in (None, "", "cpu", "portable"):
            raise NNVMError(format_error(f"target '{target}'", f"option -kernels={family}",
                                         "cpu or portable", family,
                                         fix="Drop the option to choose by device type"))
        if family == "portable":
            limits["device_type"] = "portable"
        elif family == "cpu":
            limits["device_type"] = "cpu"
        unsupported = set(HOST_OPS)
        if not limits["fp64"]:
            unsupported |= {"__float64__"}
        renderer = OpenCLRenderer()
        steps = lower_graph(graph, renderer, limits, unsupported)
        info = GraphInfo(graph)
        if not limits["fp64"]:
            _host_float64(info, steps)
        offsets, arena, act = plan_arena(info, steps, _reshape_aliases(info, steps))
        source = renderer.render_program([k for s in steps for k in s.kernels])
        return OpenCLModule(graph, params, str(target), steps, offsets, arena, act, source,
                            platform, device)

    def load(self, artifact):
        from .module import OpenCLModule, plan_from_json
        from .plan_schema import load_plan

        members = artifact.members
        plan, source = load_plan(artifact)  # schema + graph checks before any device work
        steps, offsets, arena, act = plan_from_json(plan)
        from nnvm.backend import parse_target

        target = parse_target(artifact.target)
        binary = None
        platform, device = target.get("platform"), target.get("device")
        _, dev = devices.select(platform, device)
        from .program import cache_key

        binary = members.get(f"kernels.{cache_key(source, dev)[:16]}.bin")
        return OpenCLModule(artifact.graph(), artifact.params, artifact.target, steps, offsets,
                            arena, act, source, platform, device, binary)


def _host_float64(info, steps) -> None:
    """Without cl_khr_fp64, float64 kernels cannot compile: run those groups on the host."""
    from nnvm_codegen_c.lower import Step

    for i, s in enumerate(steps):
        if s.kind == "kernel" and any(info.dtypes[e] == "float64" for e in s.inputs + s.outputs):
            if len(s.members) == 1:
                steps[i] = Step("host", s.root, s.members, [], s.outputs, s.inputs,
                                "float64 needs cl_khr_fp64, which the device lacks")


def _reshape_aliases(info, steps) -> dict[int, int]:
    """{output entry: input entry} for steps that only reshape: such a step launches no
    kernel and its output is a view of the input's arena bytes (a copy kernel per reshape
    cost a launch and a pass over memory for nothing)."""
    from nnvm_codegen_c.arena import host_only

    aliases = {}
    for s in steps:
        if s.kind != "kernel" or len(s.members) != 1:
            continue
        nid = s.members[0]
        if info.idx.nodes[nid].op.name not in RESHAPES:
            continue
        src, out = info.inputs(nid)[0], info.entry(nid, 0)
        if info.dtypes[src] != info.dtypes[out] or host_only(info.dtypes[out]):
            continue
        aliases[out] = src
        s.kernels.clear()
    return aliases
