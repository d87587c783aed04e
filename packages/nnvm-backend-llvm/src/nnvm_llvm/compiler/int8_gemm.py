"""``matmul_integer`` with a uint8 x int8 AVX512-VNNI GEMM written in TIR (AVX2 targets run
the same kernel 8 lanes wide, ``vpdpbusd`` emulated exactly with ``vpmaddwd``: ddddocr's
integer layers at 2.1x the int32 templates' speed, VNNI at 5x).

Why: the integer GEMM used to be the float template on operands widened to int32: 16
multiply-adds per instruction, where ``vpdpbusd`` does 64 (four unsigned x signed byte
products summed into each int32 lane, exactly). onnxruntime's MLAS runs its u8s8 kernel
with it on this Zen 4; ddddocr's 20 x 1024 x 8210 classifier took 5.6 ms against its 2.3.

The weight (a param) is packed at load (``runtime.packing``'s ``matmul_vnni``): panels of
``bn`` columns, each K row a 4-byte group per column, uint8 weights stored as ``w - 128``
(``vpdpbusd``'s second operand is signed). Activations are copied once into rows padded to a
multiple of 4 bytes (int8 ones shifted by +128 into uint8), with their row sums. The
register tile is ``mr`` rows x ``bn`` columns of int32 accumulators, A's 4-byte group
broadcast against one vector load of each column group (MLAS's
``QgemmU8S8KernelAvx512Vnni`` shape). The zero points and both shifts come out at the end
with row and column sums (``(a - za)(w - zw) = a w - zw sum a - za sum w + K za zw``):

    y = P' - (ta + za) * colsum(w') + (s - zw) * (rowsum(a) - K * za)

with ``P'`` the accumulated ``a' . w'``, ``ta``/``s`` the 128 shifts (0 for operands already
of the right sign) and ``colsum(w')`` computed by the packer (the panel's last group row), so
a GEMV reads each weight byte once and multiplies it once. Everything is exact int32
arithmetic, so the result equals onnxruntime's.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx.script.builder import ir as T

from .schedules import PARALLEL_MIN_WORK

VNNI = "llvm.x86.avx512.vpdpbusd.512"
#: int32 lanes of one zmm register: the VNNI column group
LANES = 16


def int8_lanes() -> int:
    """int32 lanes of the int8 kernels for the target being built (TVM's current target):
    16 with AVX512-VNNI (and AVX512-VL for the 8-lane form), 8 with AVX2 (``vpdpbusd``
    emulated exactly with ``vpmaddwd``), 0 otherwise or without a current target (the int32
    templates, always correct)."""
    import tvm

    tgt = tvm.target.Target.current(allow_none=True)
    if tgt is None or str(tgt.kind.name) != "llvm":
        return 0
    try:
        def has(*features):
            return all(bool(tvm.target.codegen.target_has_features(f, tgt)) for f in features)
        return LANES if has("avx512vnni", "avx512vl") else 8 if has("avx2") else 0
    except Exception:  # noqa: BLE001 - not an x86 target, or LLVM without the feature
        return 0


def panel_width(n: int, lanes: int) -> int:
    """Columns per weight panel: four vectors, fewer for a narrow N."""
    return lanes * min(4, -(-n // lanes))


def vnni_dot(acc, a, b, lanes: int, emulate: bool = False):
    """``acc + sum of 4 u8 x s8 byte products`` per int32 lane of ``lanes`` (16: zmm, 8:
    ymm). ``vpdpbusd`` (LLVM's intrinsic takes the bytes as ``<4 lanes x i8>``), or with
    ``emulate`` AVX2's ``vpmaddwd`` on the even and the odd bytes widened to int16 (u8 zero-,
    s8 sign-extended): each pair sum is at most 2 x 255 x 128, so the result is exact, where
    ``vpmaddubsw`` (onnxruntime's AVX2 kernel) saturates at int16."""
    if emulate:
        i16 = f"int16x{2 * lanes}"
        low = bcast(tirx.const(0x00FF00FF, "int32"), lanes)
        a_even = T.reinterpret(i16, a & low)
        a_odd = T.reinterpret(i16, (a >> 8) & low)
        b16 = T.reinterpret(i16, b)
        eight = tirx.Broadcast(tirx.const(8, "int16"), 2 * lanes)
        b_even, b_odd = (b16 << eight) >> eight, b16 >> eight
        name = "llvm.x86.avx2.pmadd.wd" if lanes == 8 else "llvm.x86.avx512.pmaddw.d.512"
        dot = (T.call_llvm_pure_intrin(f"int32x{lanes}", name, a_even, b_even),
               T.call_llvm_pure_intrin(f"int32x{lanes}", name, a_odd, b_odd))
        return acc + dot[0] + dot[1]
    name = VNNI if lanes == LANES else f"llvm.x86.avx512.vpdpbusd.{32 * lanes}"
    return T.call_llvm_pure_intrin(f"int32x{lanes}", name, acc,
                                   T.reinterpret(f"int8x{4 * lanes}", a),
                                   T.reinterpret(f"int8x{4 * lanes}", b))


def ramp(base, n: int):
    return tirx.Ramp(base, 1, n)


def bcast(v, n: int):
    return tirx.Broadcast(v, n)


def flat(buf, n: int, dtype=None):
    """A 1-D view of ``buf``'s storage, declared in the function being built."""
    return T.decl_buffer((n,), dtype or buf.dtype, data=buf.data)


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _row_tile(rows: int) -> int:
    for mr in (6, 5, 4):
        if rows % mr == 0:
            return mr
    return min(rows, 4)


def padded_rows(a_at, rows: int, k: int, shift: int):
    """Copy the activation rows into ``(rows, K4)`` int32 groups of 4 bytes (zero padded,
    ``+shift`` for int8 rows) and return ``(groups, row_sums)``; ``a_at(r, k)`` reads one
    element as int32."""
    k4 = -(-k // 4)
    a8 = T.alloc_buffer((rows * k4 * 4,), "uint8")
    sums = T.alloc_buffer((rows,), "int32")
    with T.serial(0, rows) as r:
        T.buffer_store(sums, tirx.const(0, "int32"), [r])
        with T.serial(0, k4 * 4) as c:
            v = tirx.Select(c < k, a_at(r, tirx.min(c, k - 1)), tirx.const(0, "int32"))
            T.buffer_store(a8, (v + shift).astype("uint8"), [r * k4 * 4 + c])
            T.buffer_store(sums, sums[r] + v, [r])
    return T.decl_buffer((rows * k4,), "int32", data=a8.data), sums


class _Gemm:
    """Emits ``y[r, c]`` for one matmul_integer: see the module docstring."""

    def __init__(self, a, bp, azp, bzp, y, n: int, bn: int, lanes: int,
                 threads_ok: bool = True):
        self.L, self.emulate = lanes, lanes != LANES
        self.k = int(a.shape[-1])
        self.k4 = -(-self.k // 4)
        self.stride = int(bp.shape[1])  # group rows per panel: K4, then the column sums
        self.rows = _prod(a.shape[:-1])
        self.n, self.bn, self.nv = n, bn, bn // lanes
        self.panels = int(bp.shape[0])
        self.a, self.azp, self.bzp = a, azp, bzp
        self.ta = 128 if str(a.dtype) == "int8" else 0
        self.s = 128 if str(bp.dtype) == "uint8" else 0
        self.bp = flat(bp, _prod(bp.shape) // 4, "int32")  # one int32 per 4-byte group
        self.y = flat(y, self.rows * n)
        work = self.rows * n * self.k
        self.parallel = threads_ok and self.panels > 1 and work >= PARALLEL_MIN_WORK

    def zp_a(self, r):
        return self.azp[(0,) * len(self.azp.shape)].astype("int32") if _prod(
            self.azp.shape) == 1 else self.azp[r].astype("int32")

    def w_vec(self, p, ko, v):
        """Column group ``v`` of K group row ``ko`` of panel ``p`` (``ko = K4``: the column
        sums the packer appended)."""
        return self.bp[ramp((p * self.stride + ko) * self.bn + v * self.L, self.L)]

    def body(self):
        k, rows, n, bn = self.k, self.rows, self.n, self.bn
        af = flat(self.a, rows * k)
        groups, sums = padded_rows(lambda r, c: af[r * k + c].astype("int32"), rows, k,
                                   self.ta)
        # (s - zw) per column, padded columns reading the last zero point
        zw = T.alloc_buffer((self.panels * bn,), "int32")
        with T.serial(0, self.panels * bn) as c:
            z = self.bzp[(0,) * len(self.bzp.shape)] if _prod(self.bzp.shape) == 1 else \
                self.bzp[tirx.min(c, n - 1)]
            T.buffer_store(zw, tirx.const(self.s, "int32") - z.astype("int32"), [c])
        # (rowsum - K za) and (ta + za) per row
        rterm = T.alloc_buffer((rows, 2), "int32")
        with T.serial(0, rows) as r:
            za = self.zp_a(r)
            T.buffer_store(rterm, sums[r] - tirx.const(k, "int32") * za, [r, 0])
            T.buffer_store(rterm, tirx.const(self.ta, "int32") + za, [r, 1])
        mr = _row_tile(rows)
        tiles, rest = divmod(rows, mr)
        with (T.parallel if self.parallel else T.serial)(0, self.panels) as p:
            if tiles:
                with T.serial(0, tiles) as t:
                    self.tile(p, t * mr, mr, groups, zw, rterm)
            if rest:
                self.tile(p, tiles * mr, rest, groups, zw, rterm)

    def tile(self, p, r0, mr, groups, zw, rterm):
        """``mr`` rows from ``r0`` x one panel."""
        nv, bn, k4, n, L = self.nv, self.bn, self.k4, self.n, self.L
        acc = T.alloc_buffer((mr * bn,), "int32", scope="local")
        zero = bcast(tirx.const(0, "int32"), L)
        for i in range(mr * nv):
            T.buffer_store(acc, zero, [ramp(i * L, L)])
        with T.serial(0, k4) as ko:
            for v in range(nv):
                w = self.w_vec(p, ko, v)
                for i in range(mr):
                    idx = ramp((i * nv + v) * L, L)
                    T.buffer_store(acc, vnni_dot(acc[idx], bcast(groups[(r0 + i) * k4 + ko], L),
                                                 w, L, self.emulate), [idx])
        for i in range(mr):
            r = r0 + i
            for v in range(nv):
                c0 = p * bn + v * L
                val = acc[ramp((i * nv + v) * L, L)] \
                    - bcast(rterm[r, 1], L) * self.w_vec(p, k4, v) \
                    + zw[ramp(c0, L)] * bcast(rterm[r, 0], L)
                if self.panels * bn == n:
                    T.buffer_store(self.y, val, [ramp(r * n + c0, L)])
                    continue
                with T.If(c0 + L <= n):
                    with T.Then():
                        T.buffer_store(self.y, val, [ramp(r * n + c0, L)])
                    with T.Else():
                        tmp = T.alloc_buffer((L,), "int32", scope="local")
                        T.buffer_store(tmp, val, [ramp(0, L)])
                        with T.serial(0, L) as j:
                            with T.If(c0 + j < n):
                                with T.Then():
                                    T.buffer_store(self.y, tmp[j], [r * n + c0 + j])


def tir_body(name: str, emit):
    """A ``te.extern`` fcompute whose body ``emit(in_bufs, out_bufs)`` writes with TVM's IR
    builder (as ``recurrent_loop`` does)."""
    def fcompute(in_bufs, out_bufs):
        with IRBuilder() as ib:
            with T.prim_func():
                T.func_name(name)
                for k, buf in enumerate(list(in_bufs) + list(out_bufs)):
                    T.arg(f"arg{k}", buf)
                emit(list(in_bufs), list(out_bufs))
        return ib.get().body
    return fcompute


def matmul_integer_vnni(a, bp, azp, bzp, out_shape, n: int, bn: int, lanes: int, name: str):
    """The int32 TE tensor of ``a @ b`` (b packed ``matmul_vnni``), one extern kernel with
    ``lanes``-wide vectors (:func:`int8_lanes`)."""
    body = tir_body(name, lambda i, o: _Gemm(*i, o[0], n, bn, lanes).body())
    return te.extern(tuple(out_shape), [a, bp, azp, bzp], body, name=name, dtype="int32")
