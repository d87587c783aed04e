"""The C-like kernel renderer: dialect hooks shared by OpenCL C and CUDA C.

Kernels are built dialect-neutrally (``nnvm_codegen_c.builder``) from small hook calls on a
renderer: how a kernel is declared, how a buffer parameter is qualified, how a work-item finds
its index, how a barrier and local memory are spelled, which C type a dtype maps to and which
name a math function has. A backend subclasses :class:`CLikeRenderer` and overrides
*attributes*, rarely methods (tinygrad's ``OpenCLRenderer`` / ``CUDARenderer``). Rendering is
pure text: no device, compiler or driver is needed to produce any kernel's source.

Launch convention (both dialects): a kernel is launched over ``global_size`` work-items in
total per dimension (OpenCL's NDRange), grouped into ``local_size`` work-groups. A CUDA
subclass launches ``grid = ceil(global / local)`` blocks of ``local`` threads and renders
``global_id(d)`` as ``blockIdx*blockDim + threadIdx``; kernels always guard ``gid < n``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from nnvm.errors import UnsupportedOpError


@dataclasses.dataclass(frozen=True)
class TensorArg:
    """One tensor parameter of a kernel: passed as a base pointer and an element offset.

    Attributes:
        name: the C name inside the kernel (the pointer after adding the offset).
        dtype: the NNVM dtype name.
        entry: the graph entry id it binds to (-1 for none).
        output: written by the kernel (else read-only, declared const).
    """

    name: str
    dtype: str
    entry: int
    output: bool = False


@dataclasses.dataclass
class Kernel:
    """A rendered kernel and how to launch it.

    Attributes:
        name: the kernel function name (unique in its program).
        source: the kernel's text (no preamble).
        args: tensor parameters in order; each is ``(base pointer, int offset)`` in C.
        global_size: work-items per dimension (multiples of ``local_size`` where given).
        local_size: work-group size, or None to let the runtime choose.
        group: the id of the fused group's root node it computes.
    """

    name: str
    source: str
    args: list[TensorArg]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None
    group: int = -1

    def to_json(self) -> dict:
        return {"name": self.name, "args": [dataclasses.asdict(a) for a in self.args],
                "global_size": list(self.global_size), "group": self.group,
                "local_size": None if self.local_size is None else list(self.local_size)}


class CLikeRenderer:
    """Dialect hooks of a C-like kernel language. Subclasses override the attributes.

    Attributes:
        dialect: a short name (``"opencl"``, ``"cuda"``).
        kernel_prefix: what precedes ``void name(...)`` in a kernel definition.
        buffer_prefix: qualifier of a global-memory pointer parameter (``__global ``).
        smem_prefix: qualifier of a work-group-shared array (``__local `` / ``__shared__ ``).
        barrier: a work-group barrier statement over local memory.
        restrict: the restrict keyword for non-aliasing pointers.
        global_id / local_id / group_id: format strings of the per-dimension index, ``{d}``
            is the dimension 0..2 (CUDA writes them with ``.x/.y/.z``, see ``dim_names``).
        type_map: NNVM dtype name -> C type.
        math_names: NNVM math function name -> C function name (defaults to the same name).
        preamble: text put once at the top of a program.
        int_type: the C type used for index arithmetic.
        float_suffix: literal suffix of a float32 constant.
        vector_types: whether ``float4``-style vector types exist (``vload4`` in OpenCL).
            Device-specific variants (``template_variant``, e.g. the OpenCL backend's CPU
            kernels) spell vectors through ``vec_type``/``vload``/``vec_lane``/``vec_half``.
        vector_widths: the vector widths the dialect has (used with ``vector_types``).
    """

    dialect = "c"
    kernel_prefix = ""
    buffer_prefix = ""
    smem_prefix = "static "
    barrier = ""
    restrict = "restrict"
    global_id = "gid{d}"
    local_id = "lid{d}"
    group_id = "grp{d}"
    dim_names = ("0", "1", "2")
    type_map = {"float32": "float", "float64": "double", "float16": "half", "int8": "char",
                "int16": "short", "int32": "int", "int64": "long", "uint8": "uchar",
                "uint16": "ushort", "uint32": "uint", "uint64": "ulong", "bool": "uchar"}
    math_names: dict[str, str] = {}
    preamble = ""
    int_type = "int"
    float_suffix = "f"
    vector_types = False
    vector_widths: tuple[int, ...] = (2, 4, 8, 16)

    # -- device-specific templates -----------------------------------------------------------
    def template_variant(self, op: str, limits: dict) -> Callable[..., bool] | None:
        """A template for ``op`` tried before the portable one in ``templates.TEMPLATES``,
        or None. It is called as ``variant(builder, master_nid)`` and returns False to decline
        (a shape or layout it does not fit); the portable template then runs on a fresh
        builder. A hook, not a table here, because variants are backend technology (the OpenCL
        backend's register-blocked CPU kernels) that this shared generator must not import.
        """
        return None

    # -- types and constants -----------------------------------------------------------------
    def ctype(self, dtype: str) -> str:
        """The C type of an NNVM dtype; raises UnsupportedOpError for one the dialect lacks."""
        try:
            return self.type_map[dtype]
        except KeyError:
            raise UnsupportedOpError(f"{self.dialect} renderer: dtype '{dtype}' has no C type; "
                                     f"supported: {', '.join(sorted(self.type_map))}") from None

    def const(self, value, dtype: str) -> str:
        """A literal of ``dtype`` (infinities and NaN spelled with the dialect's macros)."""
        if dtype in ("float32", "float64", "float16"):
            v = float(value)
            if math.isnan(v):
                return "NAN"
            if math.isinf(v):
                return "INFINITY" if v > 0 else "(-INFINITY)"
            text = repr(v)
            if "e" not in text and "." not in text:
                text += ".0"
            if dtype == "float32":
                return f"{text}{self.float_suffix}" if v >= 0 else f"({text}{self.float_suffix})"
            return f"(({self.ctype(dtype)}){text})"
        if dtype == "bool":
            return "1" if value else "0"
        iv = int(value)
        if dtype in ("int64", "uint64"):
            return f"(({self.ctype(dtype)}){iv})"
        return str(iv) if iv >= 0 else f"({iv})"

    def cast(self, expr: str, dtype: str) -> str:
        return f"(({self.ctype(dtype)})({expr}))"

    def func(self, name: str, dtype: str | None = None) -> str:
        """The dialect's name of math function ``name`` (``exp``, ``tanh``, ``erf``...) for
        arguments of ``dtype`` (a dialect may have faster versions for some types)."""
        return self.math_names.get(name, name)

    # -- vectors (only called when ``vector_types``) -----------------------------------------
    def vec_type(self, dtype: str, n: int) -> str:
        """The ``n``-wide vector type of ``dtype`` (``float8``)."""
        return f"{self.ctype(dtype)}{n}"

    def vload(self, n: int, ptr: str, dtype: str = "float32") -> str:
        """``n`` consecutive ``dtype`` elements at global-memory pointer expression ``ptr``
        (no alignment needed)."""
        return f"vload{n}(0, {ptr})"

    def vec_lane(self, vec: str, i: int) -> str:
        """Lane ``i`` of vector variable ``vec``."""
        return f"{vec}.s{'0123456789abcdef'[i]}"

    def vec_half(self, vec: str, high: bool) -> str:
        """The low or high half of vector variable ``vec`` (for horizontal sums)."""
        return f"{vec}.{'hi' if high else 'lo'}"

    def vec_and_mask(self, vec: str, mask: str, dtype: str, n: int) -> str:
        """``vec`` with the lanes where int vector ``mask`` is 0 set to 0 (bitwise, so a
        NaN or Inf read from outside a tensor cannot leak in as ``NaN * 0`` would)."""
        ivt = self.vec_type("int32", n) if dtype in ("float32", "int32") else \
            self.vec_type("int64", n)
        return f"as_{self.vec_type(dtype, n)}(as_{ivt}({vec}) & {mask})"

    def vec_splat(self, dtype: str, n: int, expr: str) -> str:
        """A vector of ``n`` copies of scalar ``expr``."""
        return f"(({self.vec_type(dtype, n)})({expr}))"

    def ptr_decl(self, dtype: str, name: str, expr: str, const: bool = True) -> str:
        """Declare a global-memory pointer ``name`` = ``expr`` (a row inside a tensor)."""
        return (f"{self.buffer_prefix}{'const ' if const else ''}{self.ctype(dtype)}* "
                f"{name} = {expr};")

    # -- declarations ------------------------------------------------------------------------
    def index(self, kind: str, d: int) -> str:
        """``kind`` in global/local/group: the work-item's index in dimension ``d``."""
        fmt = {"global": self.global_id, "local": self.local_id, "group": self.group_id}[kind]
        return fmt.format(d=self.dim_names[d])

    def smem_decl(self, dtype: str, name: str, size: int) -> str:
        return f"{self.smem_prefix}{self.ctype(dtype)} {name}[{size}];"

    def kernel_attrs(self, local_size: tuple[int, ...] | None) -> str:
        """Text between the kernel prefix and ``void`` (e.g. a required work-group size)."""
        return ""

    def param_decls(self, arg: TensorArg) -> list[str]:
        const = "" if arg.output else "const "
        return [f"{self.buffer_prefix}{const}{self.ctype(arg.dtype)}* {self.restrict} "
                f"{arg.name}_base", f"const {self.int_type} {arg.name}_off"]

    def param_prologue(self, arg: TensorArg) -> str:
        const = "" if arg.output else "const "
        return (f"{self.buffer_prefix}{const}{self.ctype(arg.dtype)}* {self.restrict} "
                f"{arg.name} = {arg.name}_base + {arg.name}_off;")

    def render_kernel(self, name: str, args: list[TensorArg], body: list[str],
                      local_size: tuple[int, ...] | None = None) -> str:
        """The full text of one kernel: signature, pointer prologue, body."""
        params = [p for a in args for p in self.param_decls(a)]
        attrs = self.kernel_attrs(local_size)
        qualifiers = "".join(f"{q} " for q in (self.kernel_prefix, attrs) if q)
        head = f"{qualifiers}void {name}(" + ",\n    ".join(params) + ") {"
        lines = [head] + ["  " + self.param_prologue(a) for a in args]
        lines += ["  " + ln if ln else "" for ln in body]
        lines.append("}")
        return "\n".join(lines) + "\n"

    def render_program(self, kernels: list[Kernel]) -> str:
        """The program text: the preamble then every kernel, in order."""
        return self.preamble + "\n".join(k.source for k in kernels)
