"""Neural-network layers: dense, matmul, conv2d, pooling, softmax, batch_norm, dropout, activations.

Each op is one ``defs.op`` record: shape rule (which also fills weight and bias shapes from
the data shape and the attributes, so ``sym.dense(x, units=16, name="fc1")`` gets
``fc1_weight`` inferred), dtype rule, vectorised NumPy reference kernel, gradient and fusion
pattern. Convolution and pooling gradients are dedicated ``_*_backward`` ops, themselves full
records, because their adjoints are not compositions of forward ops. Layouts: any permutation of
``NCHW`` for data and of ``OIHW`` for conv kernels; kernels transpose to the canonical order,
compute there, and transpose back.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import ShapeError, TypeInferenceError
from ..op import OpPattern, OpSet
from ..params import Param
from .common import first_input_shape, inplace_first, op, outputs, same_dtype, to_dtype

defs = OpSet("nn")

OPAQUE, FUSABLE = OpPattern.OPAQUE, OpPattern.OUT_ELEMWISE_FUSABLE


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise ShapeError(msg)


def _fill(vals: list, k: int, value, label: str) -> None:
    """Set ``vals[k]`` to ``value`` unless it is known and different (then name the input)."""
    if vals[k] is not None and tuple(vals[k]) != tuple(value):
        raise ShapeError(f"{label} has shape {tuple(vals[k])}; expected {tuple(value)}")
    vals[k] = tuple(value)


def _float_dtype(attrs, ins, outs):
    """Float layers: one dtype for every operand, and it must be a floating type."""
    ins, outs = same_dtype(attrs, ins, outs)
    t = next((v for v in (*ins, *outs) if v is not None), None)
    if t is not None and not (t.startswith("float") or t == "bfloat16"):
        raise TypeInferenceError(f"expects floating-point operands; got {t}. Insert a cast")
    return ins, outs


# -- dense and matmul ---------------------------------------------------------------------------

def _dense_inputs(attrs):
    return ("data", "weight", "bias") if attrs.get("use_bias", True) else ("data", "weight")


def _dense_shape(attrs, ins, outs):
    units = attrs["units"]
    ins, outs = list(ins), list(outs)
    data, weight = ins[0], ins[1]
    if data is None and outs[0] is not None and weight is not None:
        ins[0] = data = tuple(outs[0][:-1]) + (weight[1],)
    if data is not None:
        _expect(len(data) >= 1, f"data must have at least 1 dimension; got shape {data}")
        _fill(ins, 1, (units, data[-1]), "weight")
        _fill(outs, 0, tuple(data[:-1]) + (units,), "output")
    elif weight is not None:
        _expect(len(weight) == 2 and weight[0] == units,
                f"weight must have shape (units={units}, in_dim); got {weight}")
    if attrs.get("use_bias", True):
        _fill(ins, 2, (units,), "bias")
    return ins, outs


def _dense_ref(attrs, x, w, b=None):
    y = np.matmul(x, w.T)
    if b is not None:
        y = y + b
    return to_dtype(y, x)


def _dense_grad(n, og):
    x, w = n.inputs[0], n.inputs[1]
    grads = [op("matmul", og[0], w),
             op("collapse_sum_like", op("matmul", og[0], x, transpose_a=True), w)]
    if n.attrs["use_bias"]:
        grads.append(op("collapse_sum_like", og[0], n.inputs[2]))
    return grads


defs.op("dense", doc="Fully connected layer: y = x W^T + b, weight (units, in_dim); "
            "data (..., in_dim) -> (..., units).", inputs=_dense_inputs,
            params=[Param("units", "int", doc="number of output features"),
                    Param("use_bias", "bool", True, "add a bias vector")],
            shape=_dense_shape, dtype=_float_dtype, reference=_dense_ref, gradient=_dense_grad,
            pattern=FUSABLE, support_level=1)


def _mm_dims(shape, transpose, side):
    if len(shape) == 1:
        return (1, shape[0]) if side == "a" else (shape[0], 1)
    return (shape[-1], shape[-2]) if transpose else (shape[-2], shape[-1])


def _matmul_shape(attrs, ins, outs):
    a, b = ins
    if a is None or b is None:
        return ins, outs
    _expect(len(a) >= 1 and len(b) >= 1, f"operands must be at least 1-D; got {a} and {b}")
    m, ka = _mm_dims(a, attrs["transpose_a"], "a")
    kb, n = _mm_dims(b, attrs["transpose_b"], "b")
    _expect(ka == kb, f"contracted dimensions differ: lhs {a} gives {ka}, rhs {b} gives {kb} "
                      f"(transpose_a={attrs['transpose_a']}, transpose_b={attrs['transpose_b']})")
    from .common import broadcast_shapes

    batch = broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
    return ins, [out]


def _matmul_ref(attrs, a, b):
    if attrs["transpose_a"] and a.ndim > 1:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"] and b.ndim > 1:
        b = np.swapaxes(b, -1, -2)
    return to_dtype(np.matmul(a, b), a)


def _matmul_grad(n, og):
    """Adjoints of C = op(A) op(B) for the four transpose cases (operands at least 2-D),
    summed back over broadcast batch dimensions."""
    a, b = n.inputs
    ta, tb, g = n.attrs["transpose_a"], n.attrs["transpose_b"], og[0]
    if not ta and not tb:
        ga, gb = op("matmul", g, b, transpose_b=True), op("matmul", a, g, transpose_a=True)
    elif not ta and tb:
        ga, gb = op("matmul", g, b), op("matmul", g, a, transpose_a=True)
    elif ta and not tb:
        ga, gb = op("matmul", b, g, transpose_b=True), op("matmul", a, g)
    else:
        ga = op("matmul", b, g, transpose_a=True, transpose_b=True)
        gb = op("matmul", g, a, transpose_a=True, transpose_b=True)
    return [op("collapse_sum_like", ga, a), op("collapse_sum_like", gb, b)]


defs.op("matmul", doc="Matrix product with numpy batch broadcasting; transpose_a/b swap "
            "the last two axes of an operand first.", inputs=("lhs", "rhs"),
            params=[Param("transpose_a", "bool", False, "use lhs^T"),
                    Param("transpose_b", "bool", False, "use rhs^T")],
            shape=_matmul_shape, dtype=same_dtype, reference=_matmul_ref, gradient=_matmul_grad,
            pattern=FUSABLE, support_level=1)


# -- layouts and window geometry -----------------------------------------------------------------

def _perm(layout: str, canon: str) -> tuple[int, ...]:
    """Axes that turn an array in ``layout`` into ``canon`` order (after validating it)."""
    if len(layout) != len(canon) or sorted(layout) != sorted(canon):
        raise ShapeError(f"layout '{layout}' is not supported; expected a permutation of "
                         f"'{canon}' (e.g. '{canon}'). Convert with transpose first")
    return tuple(layout.index(c) for c in canon)


def _to_canon(shape, layout, canon):
    return tuple(shape[a] for a in _perm(layout, canon))


def _from_canon(shape, layout, canon):
    return tuple(shape[canon.index(c)] for c in layout)


def _pads(padding) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from NNVM's (p,), (ph, pw) or (top, left, bottom, right)."""
    p = tuple(padding)
    if len(p) == 1:
        return (p[0],) * 4
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    if len(p) == 4:
        return p
    raise ShapeError(f"padding must have 1, 2 or 4 values; got {p}")


def _pair(v, name) -> tuple[int, int]:
    v = tuple(v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise ShapeError(f"{name} must have 2 values (height, width); got {v}")
    return v


def _windows(xp, k, s, d, out_hw):
    """(N, C, OH, OW, kh, kw) strided view of the padded NCHW input: no copies, no loops."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = k, s, d, out_hw
    v = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return v[:, :, :(oh - 1) * sh + 1:sh, :(ow - 1) * sw + 1:sw, ::dh, ::dw]


def _scatter_windows(cols, padded_hw, k, s, d, out_hw):
    """Adjoint of ``_windows``: add (N, C, OH, OW, kh, kw) back onto the padded grid.

    Loops run over the kernel offsets only (kh*kw strided adds), never over pixels.
    """
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = k, s, d, out_hw
    n, c = cols.shape[:2]
    out = np.zeros((n, c) + tuple(padded_hw), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                j * dw:j * dw + (ow - 1) * sw + 1:sw] += cols[..., i, j]
    return out


# -- conv2d -------------------------------------------------------------------------------------

def _conv_params(with_bias: bool = True):
    ps = [Param("channels", "int", doc="number of output channels"),
          Param("kernel_size", "ints", doc="(kh, kw)"),
          Param("strides", "ints", (1, 1), "(sh, sw)"),
          Param("padding", "ints", (0, 0), "(ph, pw) or (top, left, bottom, right)"),
          Param("dilation", "ints", (1, 1), "(dh, dw)"),
          Param("groups", "int", 1, "channel groups; groups == in_channels is depthwise"),
          Param("layout", "str", "NCHW", "data layout, a permutation of NCHW"),
          Param("kernel_layout", "str", "OIHW", "weight layout, a permutation of OIHW"),
          Param("out_layout", "str", "__undef__", "output layout; default: layout"),
          Param("out_dtype", "str", "same", "output dtype; 'same' = input dtype")]
    if with_bias:
        ps.append(Param("use_bias", "bool", True, "add a bias per output channel"))
    return ps


class ConvGeometry:
    """Conv2d geometry from attributes (validated once per call).

    Public because kernel generators (nnvm-codegen-c, the OpenCL CPU templates) read the
    same kernel/stride/dilation/padding/groups the reference kernel uses, so they cannot
    disagree with it.
    """

    def __init__(self, attrs):
        self.layout = attrs["layout"]
        self.klayout = attrs["kernel_layout"]
        _perm(self.layout, "NCHW")
        _perm(self.klayout, "OIHW")
        out_layout = attrs.get("out_layout", "__undef__")
        if out_layout not in ("__undef__", "", self.layout):
            raise ShapeError(f"out_layout '{out_layout}' differs from layout '{self.layout}'; "
                             f"only out_layout == layout is supported")
        if attrs.get("out_dtype", "same") not in ("same", ""):
            raise ShapeError(f"out_dtype '{attrs['out_dtype']}' is not supported; "
                             f"cast the result instead")
        self.k = _pair(attrs["kernel_size"], "kernel_size")
        self.s = _pair(attrs["strides"], "strides")
        self.d = _pair(attrs["dilation"], "dilation")
        self.p = _pads(attrs["padding"])
        self.groups = attrs["groups"]
        self.channels = attrs["channels"]
        _expect(min(self.k + self.s + self.d) >= 1 and min(self.p) >= 0 and self.groups >= 1,
                f"kernel_size, strides, dilation and groups must be positive and padding "
                f"non-negative; got kernel_size={self.k}, strides={self.s}, "
                f"dilation={self.d}, padding={self.p}, groups={self.groups}")

    def out_hw(self, h, w):
        pt, pl, pb, pr = self.p
        oh = (h + pt + pb - self.d[0] * (self.k[0] - 1) - 1) // self.s[0] + 1
        ow = (w + pl + pr - self.d[1] * (self.k[1] - 1) - 1) // self.s[1] + 1
        _expect(oh > 0 and ow > 0, f"the (dilated) kernel {self.k} does not fit the padded "
                                   f"input {h}x{w} (padding {self.p}); output would be "
                                   f"{oh}x{ow}")
        return oh, ow

    def weight_shape(self, c):
        _expect(c % self.groups == 0 and self.channels % self.groups == 0,
                f"in_channels={c} and channels={self.channels} must both be divisible by "
                f"groups={self.groups}")
        return _from_canon((self.channels, c // self.groups) + self.k, self.klayout, "OIHW")

    def canon_x(self, x):
        return np.transpose(x, _perm(self.layout, "NCHW"))

    def canon_w(self, w):
        return np.transpose(w, _perm(self.klayout, "OIHW"))

    def from_canon_x(self, y):
        return np.transpose(y, tuple("NCHW".index(c) for c in self.layout))

    def from_canon_w(self, w):
        return np.transpose(w, tuple("OIHW".index(c) for c in self.klayout))

    def pad(self, x):
        pt, pl, pb, pr = self.p
        return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr))) if any(self.p) else x

    def grouped_windows(self, x):
        """(N, G, C/G, OH, OW, kh, kw) windows of canonical ``x``."""
        n, c, h, w = x.shape
        oh, ow = self.out_hw(h, w)
        win = _windows(self.pad(x), self.k, self.s, self.d, (oh, ow))
        return win.reshape((n, self.groups, c // self.groups, oh, ow) + self.k), (oh, ow)


def _conv_inputs(attrs):
    return ("data", "weight", "bias") if attrs.get("use_bias", True) else ("data", "weight")


def _conv2d_shape(attrs, ins, outs):
    cv = ConvGeometry(attrs)
    ins, outs = list(ins), list(outs)
    if attrs.get("use_bias", True):
        _fill(ins, 2, (cv.channels,), "bias")
    data = ins[0]
    if data is None:
        if ins[1] is not None:
            o, i = _to_canon(ins[1], cv.klayout, "OIHW")[:2]
            _expect(o == cv.channels, f"weight {ins[1]} has {o} output channels; "
                                      f"expected channels={cv.channels}")
        return ins, outs
    _expect(len(data) == 4, f"data must be 4-D ({cv.layout}); got shape {data}")
    n, c, h, w = _to_canon(data, cv.layout, "NCHW")
    _fill(ins, 1, cv.weight_shape(c), "weight")
    oh, ow = cv.out_hw(h, w)
    _fill(outs, 0, _from_canon((n, cv.channels, oh, ow), cv.layout, "NCHW"), "output")
    return ins, outs


def _conv2d_ref(attrs, x, w, b=None):
    cv = ConvGeometry(attrs)
    xc, wc = cv.canon_x(x), cv.canon_w(w)
    win, (oh, ow) = cv.grouped_windows(xc)
    g = cv.groups
    wg = wc.reshape((g, wc.shape[0] // g) + wc.shape[1:])
    y = np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True)
    y = y.reshape(xc.shape[0], -1, oh, ow)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return to_dtype(cv.from_canon_x(y), x)


def _conv2d_backward_data_ref(attrs, og, w, x):
    cv = ConvGeometry(attrs)
    ogc, wc, xc = cv.canon_x(og), cv.canon_w(w), cv.canon_x(x)
    n, c, h, wd = xc.shape
    g = cv.groups
    oh, ow = ogc.shape[2:]
    ogg = ogc.reshape((n, g, ogc.shape[1] // g, oh, ow))
    wg = wc.reshape((g, wc.shape[0] // g) + wc.shape[1:])
    cols = np.einsum("ngohw,gocij->ngchwij", ogg, wg, optimize=True)
    cols = cols.reshape((n, c, oh, ow) + cv.k)
    pt, pl, pb, pr = cv.p
    dxp = _scatter_windows(cols, (h + pt + pb, wd + pl + pr), cv.k, cv.s, cv.d, (oh, ow))
    return to_dtype(cv.from_canon_x(dxp[:, :, pt:pt + h, pl:pl + wd]), og)


def _conv2d_backward_weight_ref(attrs, og, x):
    cv = ConvGeometry(attrs)
    ogc, xc = cv.canon_x(og), cv.canon_x(x)
    win, (oh, ow) = cv.grouped_windows(xc)
    g = cv.groups
    ogg = ogc.reshape((ogc.shape[0], g, ogc.shape[1] // g, oh, ow))
    dw = np.einsum("ngchwij,ngohw->gocij", win, ogg, optimize=True)
    return to_dtype(cv.from_canon_w(dw.reshape((-1,) + dw.shape[2:])), og)


def _conv_attrs(n):
    return {k: v for k, v in n.attrs.items() if k in _CONV_KEYS}


def _conv2d_grad(n, og):
    x, w = n.inputs[0], n.inputs[1]
    a = _conv_attrs(n)
    grads = [op("_conv2d_backward_data", og[0], w, x, **a),
             op("_conv2d_backward_weight", og[0], x, **a)]
    if n.attrs["use_bias"]:
        grads.append(op("sum", og[0], axis=(n.attrs["layout"].index("C"),), exclude=True))
    return grads


def _bwd_data_shape(attrs, ins, outs):
    """out_grad, weight, data: the forward rule relates them; the output is data-shaped."""
    og, w, data = ins
    data = data if data is not None else outs[0]
    fwd_ins, fwd_outs = _conv2d_shape(dict(attrs, use_bias=False), [data, w], [og])
    ins = [fwd_outs[0], fwd_ins[1], fwd_ins[0]]
    outs = list(outs)
    if ins[2] is not None:
        _fill(outs, 0, ins[2], "output")
    return ins, outs


def _bwd_weight_shape(attrs, ins, outs):
    """out_grad, data -> weight-shaped output, checked by the forward rule."""
    fwd_ins, fwd_outs = _conv2d_shape(dict(attrs, use_bias=False), [ins[1], outs[0]], [ins[0]])
    return [fwd_outs[0], fwd_ins[0]], [fwd_ins[1]]


def _bwd_data_grad(n, og):
    """y = B(g, w) is bilinear with <B(g, w), G> = <g, conv(G, w)>: both adjoints are convs."""
    g, w, x = n.inputs
    a = _conv_attrs(n)
    return [op("conv2d", og[0], w, use_bias=False, **a),
            op("_conv2d_backward_weight", g, og[0], **a), None]


def _bwd_weight_grad(n, og):
    """<W(g, x), G> = <g, conv(x, G)>: adjoint in g is conv, in x is backward-data."""
    g, x = n.inputs
    a = _conv_attrs(n)
    return [op("conv2d", x, og[0], use_bias=False, **a),
            op("_conv2d_backward_data", g, og[0], x, **a)]


_CONV_KEYS = {p.name for p in _conv_params(with_bias=False)}

defs.op("conv2d", doc="2-D convolution (cross-correlation) with strides, padding, "
            "dilation and groups (groups == in_channels is depthwise).", inputs=_conv_inputs,
            params=_conv_params(), shape=_conv2d_shape, dtype=_float_dtype,
            reference=_conv2d_ref, gradient=_conv2d_grad, pattern=FUSABLE, support_level=2)
defs.op("_conv2d_backward_data", doc="Gradient of conv2d with respect to its data input "
            "(input 'data' supplies only the shape).", inputs=("out_grad", "weight", "data"),
            params=_conv_params(with_bias=False), shape=_bwd_data_shape, dtype=_float_dtype,
            reference=_conv2d_backward_data_ref, gradient=_bwd_data_grad, pattern=OPAQUE,
            FIgnoreInputs=lambda attrs: [2], TIsBackward=True, support_level=10)
defs.op("_conv2d_backward_weight", doc="Gradient of conv2d with respect to its weight.",
            inputs=("out_grad", "data"), params=_conv_params(with_bias=False),
            shape=_bwd_weight_shape, dtype=_float_dtype,
            reference=_conv2d_backward_weight_ref, gradient=_bwd_weight_grad, pattern=OPAQUE,
            FCorrectLayout=lambda attrs, ins, outs: ([attrs["layout"]] * 2,
                                                     [attrs["kernel_layout"]]),
            TIsBackward=True, support_level=10)


# -- pooling ------------------------------------------------------------------------------------

def _pool_params(avg: bool):
    ps = [Param("pool_size", "ints", doc="(kh, kw)"),
          Param("strides", "ints", (1, 1), "(sh, sw)"),
          Param("padding", "ints", (0, 0), "(ph, pw) or (top, left, bottom, right)"),
          Param("layout", "str", "NCHW", "data layout, a permutation of NCHW"),
          Param("ceil_mode", "bool", False, "round the output size up (extra bottom/right "
                                             "padding of stride-1, as TVM)")]
    if avg:
        ps.append(Param("count_include_pad", "bool", False,
                        "average over the full window including padding"))
    return ps


class PoolGeometry:
    """Pooling geometry. ceil_mode rounds the output size up, padding the bottom/right as
    needed, but drops a last window that would start inside the padding (as PyTorch and
    ONNX Runtime), so no window is all padding.

    Public because kernel generators (nnvm-codegen-c, the OpenCL CPU templates) share it
    with the reference kernel.
    """

    def __init__(self, attrs):
        self.layout = attrs["layout"]
        _perm(self.layout, "NCHW")
        self.k = _pair(attrs["pool_size"], "pool_size")
        self.s = _pair(attrs["strides"], "strides")
        self.p = _pads(attrs["padding"])
        self.ceil = attrs["ceil_mode"]
        _expect(min(self.k + self.s) >= 1 and min(self.p) >= 0,
                f"pool_size and strides must be positive and padding non-negative; got "
                f"pool_size={self.k}, strides={self.s}, padding={self.p}")

    def pads(self, h, w):
        """Actual (top, left, bottom, right) padding and the output size."""
        pt, pl, pb, pr = self.p
        oh = self._out(h, pt, pb, 0)
        ow = self._out(w, pl, pr, 1)
        _expect(oh > 0 and ow > 0, f"pool_size {self.k} does not fit the padded input "
                                   f"{h}x{w} (padding {self.p})")
        pb = max(pb, (oh - 1) * self.s[0] + self.k[0] - h - pt)
        pr = max(pr, (ow - 1) * self.s[1] + self.k[1] - w - pl)
        return (pt, pl, pb, pr), (oh, ow)

    def _out(self, size, before, after, d):
        k, s = self.k[d], self.s[d]
        span = size + before + after - k
        if not self.ceil:
            return span // s + 1
        out = -(-span // s) + 1
        if (out - 1) * s >= size + before:  # last window would start inside the padding
            out -= 1
        return out

    def canon(self, x):
        return np.transpose(x, _perm(self.layout, "NCHW"))

    def back(self, y):
        return np.transpose(y, tuple("NCHW".index(c) for c in self.layout))

    def windows(self, xc, fill):
        (pt, pl, pb, pr), out = self.pads(*xc.shape[2:])
        xp = np.pad(xc, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
        return _windows(xp, self.k, self.s, (1, 1), out), (pt, pl, pb, pr), out

    def scatter(self, cols, xc, pads, out):
        pt, pl, pb, pr = pads
        h, w = xc.shape[2:]
        dxp = _scatter_windows(cols, (h + pt + pb, w + pl + pr), self.k, self.s, (1, 1), out)
        return dxp[:, :, pt:pt + h, pl:pl + w]

    def divisor(self, xc, attrs):
        """Cells per window that are averaged: all of them, or the non-padding ones."""
        if attrs.get("count_include_pad", False):
            return float(self.k[0] * self.k[1])
        ones = np.ones((1, 1) + xc.shape[2:], dtype=xc.dtype)
        win, _, _ = self.windows(ones, 0)
        return win.sum(axis=(-1, -2))


def _pool_shape(attrs, ins, outs):
    pl = PoolGeometry(attrs)
    if ins[0] is None:
        return ins, outs
    _expect(len(ins[0]) == 4, f"data must be 4-D ({pl.layout}); got shape {ins[0]}")
    n, c, h, w = _to_canon(ins[0], pl.layout, "NCHW")
    _, (oh, ow) = pl.pads(h, w)
    outs = list(outs)
    _fill(outs, 0, _from_canon((n, c, oh, ow), pl.layout, "NCHW"), "output")
    return ins, outs


def _lowest(dtype):
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _max_pool_ref(attrs, x):
    pl = PoolGeometry(attrs)
    win, _, _ = pl.windows(pl.canon(x), _lowest(x.dtype))
    return to_dtype(pl.back(win.max(axis=(-1, -2))), x)


def _avg_pool_ref(attrs, x):
    pl = PoolGeometry(attrs)
    xc = pl.canon(x)
    win, _, _ = pl.windows(xc, 0)
    return to_dtype(pl.back(win.sum(axis=(-1, -2)) / pl.divisor(xc, attrs)), x)


def _max_pool_backward_ref(attrs, og, x):
    """Route each window's gradient to its (first) maximum, as NNVM's _max_pool2d_grad."""
    pl = PoolGeometry(attrs)
    xc, ogc = pl.canon(x), pl.canon(og)
    win, pads, out = pl.windows(xc, _lowest(x.dtype))
    flat = win.reshape(win.shape[:4] + (-1,))
    arg = flat.argmax(axis=-1)
    kk = pl.k[0] * pl.k[1]
    cols = (arg[..., None] == np.arange(kk)) * ogc[..., None]
    cols = cols.reshape(win.shape).astype(og.dtype, copy=False)
    return to_dtype(pl.back(pl.scatter(cols, xc, pads, out)), og)


def _avg_pool_backward_ref(attrs, og, x):
    pl = PoolGeometry(attrs)
    xc, ogc = pl.canon(x), pl.canon(og)
    _, pads, out = pl.windows(xc, 0)
    share = ogc / pl.divisor(xc, attrs)
    cols = np.broadcast_to(share[..., None, None], share.shape + pl.k)
    return to_dtype(pl.back(pl.scatter(cols, xc, pads, out)), og)


def _pool_attrs(n):
    return dict(n.attrs)


def _pool_backward_shape(attrs, ins, outs):
    """out_grad, data: the forward pooling rule relates them; the output is data-shaped."""
    data = ins[1] if ins[1] is not None else outs[0]
    fwd_ins, fwd_outs = _pool_shape(attrs, [data], [ins[0]])
    outs = list(outs)
    if fwd_ins[0] is not None:
        _fill(outs, 0, fwd_ins[0], "output")
    return [fwd_outs[0], fwd_ins[0]], outs


defs.op("max_pool2d", doc="2-D max pooling over pool_size windows.", inputs=("data",),
            params=_pool_params(avg=False), shape=_pool_shape, dtype=same_dtype,
            reference=_max_pool_ref,
            gradient=lambda n, og: [op("_max_pool2d_backward", og[0], n.inputs[0],
                                       **_pool_attrs(n))],
            pattern=FUSABLE, support_level=2)
defs.op("avg_pool2d", doc="2-D average pooling over pool_size windows.", inputs=("data",),
            params=_pool_params(avg=True), shape=_pool_shape, dtype=_float_dtype,
            reference=_avg_pool_ref,
            gradient=lambda n, og: [op("_avg_pool2d_backward", og[0], n.inputs[0],
                                       **_pool_attrs(n))],
            pattern=FUSABLE, support_level=2)
defs.op("_max_pool2d_backward", doc="Gradient of max_pool2d: each window's out_grad goes "
            "to the position of its first maximum.", inputs=("out_grad", "data"),
            params=_pool_params(avg=False), shape=_pool_backward_shape, dtype=same_dtype,
            reference=_max_pool_backward_ref, pattern=OPAQUE, TIsBackward=True,
            support_level=10)
defs.op("_avg_pool2d_backward", doc="Gradient of avg_pool2d: each window's out_grad is "
            "spread evenly over the cells it averaged (input 'data' supplies only the shape).",
            inputs=("out_grad", "data"), params=_pool_params(avg=True),
            shape=_pool_backward_shape, dtype=_float_dtype, reference=_avg_pool_backward_ref,
            gradient=lambda n, og: [op("avg_pool2d", og[0], **_pool_attrs(n)), None],
            pattern=OPAQUE, FIgnoreInputs=lambda attrs: [1], TIsBackward=True,
            support_level=10)


def _global_shape(attrs, ins, outs):
    layout = attrs["layout"]
    _perm(layout, "NCHW")
    if ins[0] is None:
        return ins, outs
    _expect(len(ins[0]) == 4, f"data must be 4-D ({layout}); got shape {ins[0]}")
    out = tuple(1 if c in "HW" else d for c, d in zip(layout, ins[0]))
    outs = list(outs)
    _fill(outs, 0, out, "output")
    return ins, outs


def _hw_axes(attrs):
    layout = attrs["layout"]
    _perm(layout, "NCHW")
    return (layout.index("H"), layout.index("W"))


def _global_max_grad(n, og):
    x, y = n.inputs[0], outputs(n)[0]
    mask = op("broadcast_equal", x, y)
    return [op("where", mask, op("broadcast_add", og[0], op("zeros_like", x)),
               op("zeros_like", x))]


def _global_avg_grad(n, og):
    x, axes = n.inputs[0], _hw_axes(n.attrs)
    count = op("sum", op("ones_like", x), axis=axes, keepdims=True)
    return [op("broadcast_div", op("broadcast_add", og[0], op("zeros_like", x)), count)]


_layout_param = [Param("layout", "str", "NCHW", "data layout, a permutation of NCHW")]
defs.op("global_max_pool2d", doc="Maximum over the whole spatial extent: (N, C, 1, 1).",
            params=_layout_param, shape=_global_shape, dtype=same_dtype,
            reference=lambda attrs, x: x.max(axis=_hw_axes(attrs), keepdims=True),
            gradient=_global_max_grad, pattern=FUSABLE, support_level=2)
defs.op("global_avg_pool2d", doc="Mean over the whole spatial extent: (N, C, 1, 1).",
            params=_layout_param, shape=_global_shape, dtype=_float_dtype,
            reference=lambda attrs, x: to_dtype(x.mean(axis=_hw_axes(attrs), keepdims=True), x),
            gradient=_global_avg_grad, pattern=FUSABLE, support_level=2)


# -- softmax ------------------------------------------------------------------------------------

def _check_axis(attrs, ins, outs):
    ins, outs = first_input_shape(attrs, ins, outs)
    s = ins[0]
    if s is not None:
        _expect(-len(s) <= attrs["axis"] < len(s),
                f"axis {attrs['axis']} is out of range for shape {s}")
    return ins, outs


def _softmax_ref(attrs, x):
    e = np.exp(x - x.max(axis=attrs["axis"], keepdims=True))
    return to_dtype(e / e.sum(axis=attrs["axis"], keepdims=True), x)


def _log_softmax_ref(attrs, x):
    z = x - x.max(axis=attrs["axis"], keepdims=True)
    return to_dtype(z - np.log(np.exp(z).sum(axis=attrs["axis"], keepdims=True)), x)


def _softmax_grad(n, og):
    y, ax = outputs(n)[0], (n.attrs["axis"],)
    dot = op("sum", op("elemwise_mul", og[0], y), axis=ax, keepdims=True)
    return [op("elemwise_mul", y, op("broadcast_sub", og[0], dot))]


def _log_softmax_grad(n, og):
    y, ax = outputs(n)[0], (n.attrs["axis"],)
    total = op("sum", og[0], axis=ax, keepdims=True)
    return [op("elemwise_sub", og[0], op("broadcast_mul", op("exp", y), total))]


_axis_param = [Param("axis", "int", -1, "the axis normalised over")]
defs.op("softmax", doc="exp(x) / sum(exp(x)) along axis (numerically stabilised).",
            params=_axis_param, shape=_check_axis, dtype=_float_dtype, reference=_softmax_ref,
            gradient=_softmax_grad, pattern=OPAQUE, support_level=1)
defs.op("log_softmax", doc="log(softmax(x)) along axis, computed stably.",
            params=_axis_param, shape=_check_axis, dtype=_float_dtype,
            reference=_log_softmax_ref, gradient=_log_softmax_grad, pattern=OPAQUE,
            support_level=1)


# -- batch_norm and dropout (inference semantics) ----------------------------------------------

def _bn_shape(attrs, ins, outs):
    ins, outs = list(ins), list(outs)
    data = ins[0] if ins[0] is not None else outs[0]
    if data is None:
        return ins, outs
    ax = attrs["axis"]
    _expect(-len(data) <= ax < len(data), f"axis {ax} is out of range for data shape {data}")
    c = (data[ax],)
    ins[0] = tuple(data)
    for k, label in enumerate(("gamma", "beta", "moving_mean", "moving_var"), start=1):
        _fill(ins, k, c, label)
    _fill(outs, 0, data, "output")
    _fill(outs, 1, c, "mean")
    _fill(outs, 2, c, "var")
    return ins, outs


def _bn_bcast(v, x, axis):
    shape = [1] * x.ndim
    shape[axis] = -1
    return v.reshape(shape)


def _bn_ref(attrs, x, gamma, beta, mean, var):
    ax = attrs["axis"]
    scale = 1.0 / np.sqrt(var + attrs["epsilon"])
    if attrs["scale"]:
        scale = scale * gamma
    y = (x - _bn_bcast(mean, x, ax)) * _bn_bcast(scale, x, ax)
    if attrs["center"]:
        y = y + _bn_bcast(beta, x, ax)
    return to_dtype(y, x), mean.copy(), var.copy()


def _bn_grad(n, og):
    """Gradient of the inference form y = (x - mean) * gamma / sqrt(var + eps) + beta."""
    x, gamma, _, mean, var = n.inputs
    a = n.attrs
    ax = (a["axis"],)

    def expand(v):
        return op("expand_like", v, x, axis=ax, exclude=True)

    def per_channel(t):
        return op("sum", t, axis=ax, exclude=True)

    inv = op("__pow_scalar__", op("__add_scalar__", var, scalar=a["epsilon"]), scalar=-0.5)
    factor = op("elemwise_mul", gamma, inv) if a["scale"] else inv
    g = og[0]
    centered = op("broadcast_sub", x, expand(mean))
    sum_g = per_channel(g)
    sum_gc = per_channel(op("elemwise_mul", g, centered))
    dx = op("broadcast_mul", g, expand(factor))
    dgamma = op("elemwise_mul", sum_gc, inv) if a["scale"] else None
    dbeta = sum_g if a["center"] else None
    dmean = op("negative", op("elemwise_mul", sum_g, factor))
    dvar = op("elemwise_mul", op("elemwise_mul", sum_gc, factor), op(
        "__mul_scalar__", op("__rdiv_scalar__", op("__add_scalar__", var,
                                                   scalar=a["epsilon"]), scalar=1.0),
        scalar=-0.5))
    return [dx, dgamma, dbeta, dmean, dvar]


defs.op("batch_norm", doc="Batch normalisation with inference semantics: normalise with "
            "moving_mean/moving_var along axis; outputs (output, mean, var), one visible.",
            inputs=("data", "gamma", "beta", "moving_mean", "moving_var"),
            outputs=("output", "mean", "var"),
            params=[Param("axis", "int", 1, "the channel axis"),
                    Param("epsilon", "float", 1e-5, "added to the variance"),
                    Param("center", "bool", True, "add beta"),
                    Param("scale", "bool", True, "multiply by gamma")],
            shape=_bn_shape, dtype=_float_dtype, reference=_bn_ref, gradient=_bn_grad,
            pattern=OPAQUE, inplace=inplace_first, FNumVisibleOutputs=lambda attrs: 1,
            support_level=1)


def _dropout_shape(attrs, ins, outs):
    s = next((v for v in (ins[0], *outs) if v is not None), None)
    if s is None:
        return ins, outs
    ins, outs = list(ins), list(outs)
    _fill(ins, 0, s, "data")
    _fill(outs, 0, s, "output")
    _fill(outs, 1, s, "mask")
    return ins, outs


defs.op("dropout", doc="Dropout; inference semantics (as NNVM's compiler): output = data, "
            "mask = ones. Outputs (output, mask), one visible.", outputs=("output", "mask"),
            params=[Param("rate", "float", 0.5, "fraction dropped in training")],
            shape=_dropout_shape, dtype=same_dtype,
            reference=lambda attrs, x: (x.copy(), np.ones_like(x)),
            gradient=lambda n, og: [og[0]], pattern=OPAQUE, inplace=inplace_first,
            FInplaceIdentity=lambda attrs: [True], FNumVisibleOutputs=lambda attrs: 1,
            support_level=1)


# -- activations with parameters -----------------------------------------------------------------

def _leaky_relu_grad(n, og):
    x = n.inputs[0]
    pos = op("broadcast_greater", x, op("zeros_like", x))
    return [op("where", pos, og[0], op("__mul_scalar__", og[0], scalar=n.attrs["alpha"]))]


defs.op("leaky_relu", doc="x if x > 0 else alpha * x.",
            params=[Param("alpha", "float", 0.25, "slope for negative inputs")],
            shape=first_input_shape, dtype=_float_dtype,
            reference=lambda attrs, x: to_dtype(np.where(x > 0, x, x * attrs["alpha"]), x),
            gradient=_leaky_relu_grad, pattern=OpPattern.ELEMWISE, inplace=inplace_first,
            support_level=3)
