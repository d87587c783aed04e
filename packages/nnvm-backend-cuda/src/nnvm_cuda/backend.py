"""The ``cuda`` Backend record: lower -> plan the arena -> one .cu -> PTX per arch -> module.

Build needs only a CUDA C compiler (nvcc, or NVRTC through CuPy), never a GPU: kernels are
generated for the architecture-wide launch limits (``device.ARCH_LIMITS``) and checked
against the real device's attributes when a session starts. Importing this module does not
import CuPy.
"""

from __future__ import annotations

import json

from . import device as devices
from . import toolchain

#: ops always run on the host: graph plumbing and ops with host-side semantics.
HOST_OPS = frozenset({"device_copy", "_assign"})


def generate(graph, limits: dict | None = None):
    """Lower ``graph`` to CUDA C: ``(steps, source, info)`` (pure text, no compiler)."""
    from nnvm_codegen_c.builder import GraphInfo
    from nnvm_codegen_c.lower import lower_graph

    from .renderer import CUDARenderer

    renderer = CUDARenderer()
    steps = lower_graph(graph, renderer, dict(limits or devices.ARCH_LIMITS), set(HOST_OPS))
    source = renderer.render_program([k for s in steps for k in s.kernels])
    return steps, source, GraphInfo(graph)


class CUDABackend:
    """Backend record of the ``cuda`` target (CUDA C -> PTX, executed through CuPy)."""

    name = "cuda"
    description = "generated CUDA C kernels compiled to PTX (nvcc/NVRTC), run through CuPy"
    options = {
        "arch": "GPU architectures to emit PTX for, e.g. sm_90 or sm_80,sm_90 "
                "(default: the GPU's, else sm_80)",
        "device": "CUDA device ordinal to run on (default 0)",
        "cublas": "auto|on|off: large unfused dense/matmul through cuBLAS (default auto)",
        "compiler": "auto|nvcc|nvrtc (default auto: nvcc when installed)",
    }

    @property
    def priority(self) -> int:
        """Above llvm when kernels can run here; below reference when only compiling, so a
        GPU-less machine never picks ``cuda`` as its default target."""
        return 60 if devices.runtime_reason() is None else -10

    def is_available(self) -> str | None:
        if toolchain.compiler_reason() is None or devices.runtime_reason() is None:
            return None
        return f"{toolchain.compiler_reason()}; and cannot run: {devices.runtime_reason()}"

    def build(self, graph, params, target, config):
        from . import cublas
        from .module import CUDAModule
        from .plan import plan_arena

        ordinal = _ordinal(target.get("device", "0"))
        arches = toolchain.parse_arches(target.get("arch"),
                                        devices.device_arch(ordinal) or toolchain.DEFAULT_ARCH)
        steps, source, info = generate(graph)
        offsets, arena, act = plan_arena(info, steps)
        chosen = cublas.select(info, steps, str(target.get("cublas", "auto")).lower())
        ptx, report = toolchain.compile_ptx(source, arches, target.get("compiler"))
        report["kernels"] = sum(len(s.kernels) for s in steps)
        return CUDAModule(graph, params, str(target), steps, offsets, arena, act, source, ptx,
                          chosen, ordinal, report)

    def load(self, artifact):
        from nnvm.backend import parse_target
        from nnvm.errors import SerializationError

        from .module import CUDAModule
        from .plan import plan_from_json

        members = artifact.members
        for need in ("kernels.cu", "plan.json"):
            if need not in members:
                raise SerializationError(f"cuda artifact {artifact.path}: member {need} is "
                                         f"missing -> re-export the model")
        try:
            plan = json.loads(members["plan.json"])
        except ValueError as exc:
            raise SerializationError(f"cuda artifact: plan.json is not JSON ({exc})") from None
        steps, offsets, arena, act = plan_from_json(plan)
        ptx = {name[len("kernels."):-len(".ptx")]: data.decode("utf-8")
               for name, data in members.items()
               if name.startswith("kernels.") and name.endswith(".ptx")}
        target = parse_target(artifact.target)
        chosen = {int(i): int(f) for i, f in plan.get("cublas_steps", {}).items()}
        return CUDAModule(artifact.graph(), artifact.params, artifact.target, steps, offsets,
                          arena, act, members["kernels.cu"].decode("utf-8"), ptx, chosen,
                          _ordinal(target.get("device", "0")),
                          {"version": plan.get("compiler"), "from_artifact": True})


def _ordinal(text) -> int:
    from nnvm.errors import NNVMError

    try:
        v = int(text)
    except (TypeError, ValueError):
        v = -1
    if v < 0:
        raise NNVMError(f"target 'cuda -device={text}': expected a device ordinal >= 0")
    return v
