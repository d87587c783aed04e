"""The CUDA runtime module: built and exported anywhere, executed where a GPU is.

``build`` produces this module on a machine without a GPU too: it holds the CUDA source, the
PTX per architecture and the arena plan, and can ``export`` them. The GPU state
(``nnvm_cuda.gpu.GPUSession``: stream, arena, pinned buffers, loaded kernels) is created on
the first ``run``; without CuPy, a driver or a device that raises ``BackendUnavailableError``
naming what is missing.
"""

from __future__ import annotations

import json
import os

from nnvm_codegen_c.builder import GraphInfo
from nnvm_codegen_c.lower import Step, step_stats
from nnvm.errors import BackendUnavailableError
from nnvm.runtime.module import Module

from . import device as devices
from .plan import plan_to_json


class CUDAModule(Module):
    """Runtime module of the ``cuda`` target.

    Attributes:
        source: the model's CUDA C (``kernels.cu``).
        ptx: PTX text per architecture (``{"sm_90": ...}``).
        steps: kernel and host steps in execution order.
        cublas_steps: ``{step index: flops}`` of the GEMM steps run through cuBLAS.
    """

    def __init__(self, graph, params, target: str, steps: list[Step], offsets: dict[int, int],
                 arena_bytes: int, activation_bytes: int, source: str, ptx: dict[str, str],
                 cublas_steps: dict[int, int] | None = None, device: int = 0,
                 compile_report: dict | None = None):
        super().__init__(graph, params, target)
        self.steps, self.offsets, self.source, self.ptx = steps, offsets, source, dict(ptx)
        self.arena_bytes, self._act_bytes = arena_bytes, activation_bytes
        self.cublas_steps = dict(cublas_steps or {})
        self.device_ordinal = int(device)
        self.compile_report = dict(compile_report or {})
        self.info = GraphInfo(graph)
        self._gpu = None
        if os.environ.get("NNVM_CUDA_DUMP"):
            print(source)

    # -- execution ---------------------------------------------------------------------------
    def session(self):
        """The GPU session, created on first use.

        Raises:
            BackendUnavailableError: no CUDA driver, CuPy not installed, or no device.
        """
        if self._gpu is None:
            why = devices.runtime_reason()
            if why is not None:
                raise BackendUnavailableError(
                    f"target '{self.target}': cannot run here -> {why} -> the module is "
                    f"compiled (PTX for {', '.join(sorted(self.ptx)) or 'no arch'}) and can be "
                    f"exported with .export(path) and run with nnvm.runtime.load on a machine "
                    f"with an NVIDIA GPU, its driver and CuPy ({devices.INSTALL_HINT})")
            if self.device_ordinal >= devices.device_count():
                raise BackendUnavailableError(
                    f"target '{self.target}': device {self.device_ordinal} does not exist -> "
                    f"{devices.device_count()} CUDA device(s) found; use -device=0..")
            from .gpu import GPUSession

            self._gpu = GPUSession(self, self.device_ordinal)
        return self._gpu

    def _execute(self, feed):
        return self.session().run(feed)

    # -- stats and export --------------------------------------------------------------------
    def _num_kernels(self) -> int:
        return sum(len(s.kernels) for s in self.steps)

    def stats(self) -> dict:
        out = super().stats()
        out.update(step_stats(self.info, self.steps, self._act_bytes, self.arena_bytes))
        out.update({
            "num_cublas_gemms": len(self.cublas_steps),
            "arches": sorted(self.ptx),
            "ptx_bytes": {a: len(t) for a, t in sorted(self.ptx.items())},
            "compile": self.compile_report,
            "device": (None if self._gpu is None else devices.describe(self.device_ordinal)),
            "code_from": None if self._gpu is None else self._gpu.code_from,
        })
        return out

    def _artifact_members(self) -> dict[str, bytes]:
        plan = plan_to_json(self.steps, self.offsets, self.arena_bytes, self._act_bytes,
                            arches=sorted(self.ptx),
                            cublas_steps={str(i): f for i, f in self.cublas_steps.items()},
                            compiler=self.compile_report.get("version"))
        members = {"kernels.cu": self.source.encode("utf-8"),
                   "plan.json": json.dumps(plan, sort_keys=True).encode("utf-8")}
        for arch, text in self.ptx.items():
            members[f"kernels.{arch}.ptx"] = text.encode("utf-8")
        return members
