"""Lowering rules of the integer quantisation ops: ``dynamic_quantize_linear``,
``matmul_integer``, ``conv_integer``, ``quantize_linear`` and ``dequantize_linear``.

Why: onnxruntime's quantisation tool writes models (ddddocr's captcha OCR among them) whose
every conv and linear layer is ``DynamicQuantizeLinear -> ConvInteger / MatMulInteger``; on
the NumPy reference kernels that model ran at 80x onnxruntime with 123 host steps.

With a weight param, on a target with AVX512-VNNI or AVX2 (``int8_gemm.int8_lanes``), the
integer products are TIR kernels of their own: ``int8_gemm`` (matmul_integer) and
``int8_conv`` (2-D conv_integer, groups 1, rows at least 4 wide), uint8 x int8 byte dot
products (``vpdpbusd``, or its exact AVX2 emulation) with the zero points corrected by row
and column sums, the weights packed at load (``matmul_vnni``/``matmul_vnni8``,
``conv2d_vnni``). Everywhere else they reuse the float templates' compute shapes, so no
schedule knows about them: ``matmul_integer`` with a 2-D weight param is the packed
``anchor_dense`` GEMM (weight panels packed at load, layout ``matmul``), ``conv_integer`` in
2-D is ``lowering``'s conv2d rule (``anchor_conv2d`` with ``OIHW{bn}o`` weights, the padding
kept as its ``pad_`` stage) on the zero-point-shifted operands. The operands are widened to
int32 and shifted by their zero points inside the loop; products of two 8-bit values summed
in int32 are exact, as onnxruntime's and the reference's. Padding is applied after the
shift, so a padded element contributes 0: the input's zero point, as onnxruntime's im2col
pads.

``dynamic_quantize_linear`` is one kernel written in TIR (``int8_quantize``): vector
min/max, then one quantising pass, onnxruntime's float32 scale and rounding bit for bit.
"""

from __future__ import annotations

from tvm import te, topi

from .int8_conv import conv_integer_vnni
from .int8_gemm import int8_lanes, matmul_integer_vnni, panel_width
from .int8_quantize import dynamic_quantize_linear
from .lowering import _const, _conv2d, conv_block, register
from .lowering_nn import _conv_nd, _spatial

def _scalar(t):
    """The one element of a 0-d or 1-element tensor (zero points, scales)."""
    return t[tuple(0 for _ in t.shape)]


def _is_scalar(t) -> bool:
    n = 1
    for d in t.shape:
        n *= int(d)
    return n == 1


def _wide(v):
    return v.astype("int32")


# -- dynamic_quantize_linear --------------------------------------------------------------------

def _dql_supports(attrs, shapes):
    x = shapes[0] if shapes else None
    if x is None:
        return "dynamic_quantize_linear of unknown shape"
    return None


@register("dynamic_quantize_linear", "extern", supports=_dql_supports)
def _dynamic_quantize_linear(attrs, ins, outs, ctx):
    """One TIR kernel (``int8_quantize``): vector min/max, then one quantising pass."""
    return dynamic_quantize_linear(ins[0], outs, ctx.name, ctx.vector_lanes)


# -- matmul_integer -----------------------------------------------------------------------------

def _mm_supports(attrs, shapes):
    a, b = shapes[0], shapes[1]
    if a is None or b is None:
        return "matmul_integer of unknown shape"
    if len(a) < 2 or len(b) < 2:
        return "matmul_integer with a 1-D operand (llvm lowers matrices)"
    azp, bzp = shapes[2], shapes[3]
    n_azp = 1 if azp is None else _prod(azp)
    if n_azp != 1 and (len(a) != 2 or n_azp != a[0]):
        return f"a_zero_point of shape {azp} (llvm lowers a scalar or per-row one on 2-D a)"
    if bzp is not None and _prod(bzp) not in (1, b[-1]):
        return f"b_zero_point of shape {bzp} (llvm lowers a scalar or per-column one)"
    return None


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


#: the int8 GEMM's weight layout per vector lanes (the same panels; the name tells the
#: kernel its width, so lowering a packed node needs no current target: ``nnvm tune``)
VNNI_MATMUL = {16: "matmul_vnni", 8: "matmul_vnni8"}
VNNI_LANES = {v: k for k, v in VNNI_MATMUL.items()}


def _mm_pack(attrs, shapes, ctx):
    from .gemm import gemm_block  # gemm imports lowering, which imports this module

    a, b = shapes[0], shapes[1]
    if a is None or b is None or len(b) != 2 or len(a) < 2:
        return {}
    lanes = int8_lanes()
    if lanes:
        return {1: (VNNI_MATMUL[lanes], panel_width(int(b[1]), lanes))}
    bn = gemm_block(int(b[1]), ctx.vector_lanes)
    return {1: ("matmul", bn)} if bn > 1 else {}


def _zero_point(zp, n: int):
    """``f(index) -> int32`` reading a scalar or per-element zero point; indices past ``n``
    (the zero-padded columns of a packed panel) read the last one."""
    if _is_scalar(zp):
        return lambda i: _wide(_scalar(zp))
    return lambda i: _wide(zp[te.min(i, n - 1)])


@register("matmul_integer", "dense", pack=_mm_pack, supports=_mm_supports)
def _matmul_integer(attrs, ins, outs, ctx):
    """An int8-kernel target with a weight param: ``int8_gemm``'s kernel. Other packed weights
    (2-D param): ``anchor_dense`` over the panels. Otherwise a batched
    ``anchor_matmul`` (both operands activations, numpy batch broadcasting)."""
    a, b, azp, bzp = ins
    out_shape = outs[0][0]
    k_dim = int(a.shape[-1])
    k = te.reduce_axis((0, k_dim), "k")
    n = int(out_shape[-1])
    layout = ctx.packed.get(1, ("",))[0]
    if layout in VNNI_LANES:
        return matmul_integer_vnni(a, b, azp, bzp, out_shape, n, ctx.packed[1][1],
                                   VNNI_LANES[layout], ctx.name)
    b_zp = _zero_point(bzp, n)
    if 1 in ctx.packed:
        bn = ctx.packed[1][1]
        rows = _prod(a.shape[:-1])
        a2 = topi.reshape(a, (rows, k_dim)) if len(a.shape) != 2 else a
        a_zp = _zero_point(azp, rows)
        n_pad = int(b.shape[0]) * bn
        y = te.compute((rows, n_pad), lambda i, j: te.sum(
            (_wide(a2[i, k]) - a_zp(i)) * (_wide(b[j // bn, k, j % bn]) - b_zp(j)), axis=k),
            name="anchor_dense")
        if n_pad != n or tuple(out_shape) != (rows, n):
            y = te.compute(out_shape, lambda *i: y[(_flat_row(i[:-1], out_shape), i[-1])],
                           name=ctx.name + "_unpad")
        return y
    nb = len(out_shape) - 2
    a_zp = _zero_point(azp, int(a.shape[-2]))

    def batch(t, idx):
        off = nb - (len(t.shape) - 2)
        return tuple(0 if int(t.shape[d]) == 1 else idx[d + off] for d in range(len(t.shape) - 2))

    def body(*idx):
        i, j = idx[-2], idx[-1]
        return te.sum((_wide(a[batch(a, idx) + (i, k)]) - a_zp(i)) *
                      (_wide(b[batch(b, idx) + (k, j)]) - b_zp(j)), axis=k)
    return te.compute(out_shape, body, name="anchor_matmul")


def _flat_row(lead, shape):
    """Row of the flattened ``(rows, N)`` GEMM for the leading indices ``lead``."""
    row = lead[0] if lead else 0
    for d, v in enumerate(lead[1:], start=1):
        row = row * int(shape[d]) + v
    return row


# -- conv_integer -------------------------------------------------------------------------------

def _conv_int_supports(attrs, shapes):
    x, w = shapes[0], shapes[1]
    if x is None or w is None:
        return "conv_integer of unknown shape"
    if shapes[2] is not None and _prod(shapes[2]) != 1:
        return f"x_zero_point of shape {shapes[2]} (ONNX allows a scalar only)"
    return None


def _conv_int_pack(attrs, shapes, ctx):
    w = shapes[1]
    if w is None or len(w) != 4 or int(attrs.get("groups", 1)) != 1:
        return {}
    lanes = int8_lanes()
    if lanes and shapes[0] is not None and _out_width(attrs, shapes) >= 4:
        # (a row narrower than 4 fills under a quarter of the 16 pixel lanes: the int32
        # template, which tiles a column image along its rows, does as well)
        return {1: ("conv2d_vnni", lanes)}  # (the packer ignores the block: the lanes)
    bn = conv_block(int(w[0]), ctx.vector_lanes)
    return {1: ("conv2d", bn)} if bn > 1 else {}


def _conv2d_attrs(attrs, w_shape):
    pads = _spatial(attrs, "pads", 4, 0)
    return {"kernel_size": tuple(int(d) for d in w_shape[2:]),
            "strides": _spatial(attrs, "strides", 2, 1),
            "dilation": _spatial(attrs, "dilations", 2, 1),
            "padding": (pads[0], pads[1], pads[2], pads[3]),
            "groups": int(attrs.get("groups", 1)), "channels": int(w_shape[0]),
            "layout": "NCHW", "kernel_layout": "OIHW"}


@register("conv_integer", "conv2d", pack=_conv_int_pack, supports=_conv_int_supports)
def _conv_integer(attrs, ins, outs, ctx):
    """An int8-kernel target with a 2-D weight param (groups 1): ``int8_conv``'s kernel. Otherwise
    2-D: lowering's conv2d rule (packed weights, the ``conv2d`` template) on int32 operands
    shifted by their zero points; other ranks: the N-d rule."""
    x, w, xzp, wzp = ins
    (out_shape, _dtype), = outs
    if ctx.packed.get(1, ("",))[0] == "conv2d_vnni":
        return conv_integer_vnni(x, w, xzp, wzp, out_shape, _vnni_attrs(attrs),
                                 ctx.packed[1][1], ctx.name)
    oc = int(out_shape[1])
    x_zp = _wide(_scalar(xzp))
    xs = te.compute(x.shape, lambda *i: _wide(x[i]) - x_zp, name=ctx.name + "_xs")
    w_zp = _zero_point(wzp, oc)
    if 1 in ctx.packed:
        bn = ctx.packed[1][1]
        ws = te.compute(w.shape, lambda o, c, h, v, b: _wide(w[o, c, h, v, b]) - w_zp(o * bn + b),
                        name=ctx.name + "_ws")
    else:
        ws = te.compute(w.shape, lambda o, *r: _wide(w[(o,) + r]) - w_zp(o),
                        name=ctx.name + "_ws")
    if len(x.shape) == 4:
        return _conv2d(_conv2d_attrs(attrs, _logical_w_shape(w, ctx, oc)), [xs, ws], outs, ctx)
    nsp = len(out_shape) - 2
    pads = _spatial(attrs, "pads", 2 * nsp, 0)
    return _conv_nd(xs, ws, None, _spatial(attrs, "strides", nsp, 1), pads[:nsp],
                    _spatial(attrs, "dilations", nsp, 1), int(attrs.get("groups", 1)),
                    out_shape, "int32", ctx.name)


def _out_width(attrs, shapes) -> int:
    pads = _spatial(attrs, "pads", 4, 0)
    kw, dw = int(shapes[1][3]), _spatial(attrs, "dilations", 2, 1)[1]
    return (int(shapes[0][3]) + pads[1] + pads[3] - (kw - 1) * dw - 1) // \
        _spatial(attrs, "strides", 2, 1)[1] + 1


def _vnni_attrs(attrs) -> dict:
    return {"pads": _spatial(attrs, "pads", 4, 0), "strides": _spatial(attrs, "strides", 2, 1),
            "dilations": _spatial(attrs, "dilations", 2, 1)}


def _logical_w_shape(w, ctx, oc: int) -> tuple:
    """``(OC, IC, KH, KW)`` of the weight, whether it arrives packed or not."""
    if 1 in ctx.packed:
        return (oc,) + tuple(int(d) for d in w.shape[1:4])
    return tuple(int(d) for d in w.shape)


def conv_kind(attrs) -> str:
    """Template of a ``conv_integer`` group: grouped ones are not the blocked conv2d."""
    return "conv2d" if int(attrs.get("groups", 1)) == 1 else "depthwise"


# -- quantize_linear / dequantize_linear --------------------------------------------------------

def _qdq_supports(attrs, shapes):
    x, scale = shapes[0], shapes[1]
    if x is None or scale is None:
        return "quantize/dequantize of unknown shape"
    return None


def _param_at(p, x_shape, attrs):
    """``f(index) -> element`` of a scale or zero point against ``x`` (``nnvm.ops.quantize``'s
    ``_expand``): per tensor, per axis (1-D along ``axis``) or blocked (same rank as x,
    ``block_size`` elements per entry along ``axis``)."""
    if _is_scalar(p) and len(p.shape) <= 1:
        return lambda i: _scalar(p)
    axis = int(attrs["axis"]) % len(x_shape)
    block = int(attrs["block_size"])
    if block > 0 or len(p.shape) == len(x_shape) > 1:
        def blocked(i):
            return p[tuple((i[d] // block if d == axis else
                            (0 if int(p.shape[d]) == 1 else i[d])) for d in range(len(i)))]
        return blocked
    return lambda i: p[i[axis]]


@register("quantize_linear", "elemwise", supports=_qdq_supports)
def _quantize_linear(attrs, ins, outs, ctx):
    """``saturate(rint(x / scale) + zero_point)`` in float64, as the reference computes it
    (the division in float64 rounds once; a float32 one could land on a different integer
    at an exact half)."""
    x, scale, zp = ins
    shape, dtype = outs[0]
    s_at, z_at = _param_at(scale, shape, attrs), _param_at(zp, shape, attrs)
    lo, hi = (_const(v, "float64") for v in _int_range(dtype))

    def body(*i):
        q = te.nearbyint(x[i].astype("float64") / s_at(i).astype("float64")) + \
            z_at(i).astype("float64")
        return te.min(te.max(q, lo), hi).astype(dtype)
    return te.compute(shape, body, name=ctx.name)


def _int_range(dtype: str) -> tuple[int, int]:
    bits = int("".join(ch for ch in dtype if ch.isdigit()))
    return (0, 2 ** bits - 1) if dtype.startswith("u") else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)


@register("dequantize_linear", "elemwise", supports=_qdq_supports)
def _dequantize_linear(attrs, ins, outs, ctx):
    """``(x - zero_point) * scale`` in float64, rounded once to the scale's dtype: the
    reference's arithmetic, so the floats are the same bits."""
    x, scale, zp = ins
    shape, dtype = outs[0]
    s_at, z_at = _param_at(scale, shape, attrs), _param_at(zp, shape, attrs)
    return te.compute(shape, lambda *i: ((x[i].astype("float64") - z_at(i).astype("float64"))
                                         * s_at(i).astype("float64")).astype(dtype),
                      name=ctx.name)
