"""N-d convolution and pooling (1-3 spatial axes, layout NC...) with ONNX semantics.

``nn.py`` holds NNVM's 2-D ops; these are the ONNX forms the importer maps Conv, ConvTranspose,
MaxPool, AveragePool, LpPool and the global pools onto, for any spatial rank. Pads follow
ONNX order ``(begin_0.., end_0..)``; ``auto_pad`` is resolved by the importer. Kernels are
im2col over ``sliding_window_view`` plus one batched matmul per call (no Python loop over
pixels); the col2im used by gradients loops over kernel offsets only.
"""

from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import AttrError, ShapeError
from ..ir import NodeEntry, make_node
from ..op import OpPattern, OpSet
from ..params import Param
from .common import first_input_shape, same_dtype, to_dtype

defs = OpSet("nn_nd")

OPAQUE, OUT_FUSE = OpPattern.OPAQUE, OpPattern.OUT_ELEMWISE_FUSABLE


def _spatial(attrs, key, nsp, fill):
    v = attrs.get(key)
    return tuple(v) if v else (fill,) * nsp


def _geometry(attrs, nsp):
    """strides, pads (begin, end), dilations for ``nsp`` spatial axes."""
    s = _spatial(attrs, "strides", nsp, 1)
    p = _spatial(attrs, "pads", 2 * nsp, 0)
    d = _spatial(attrs, "dilations", nsp, 1)
    if len(s) != nsp or len(p) != 2 * nsp or len(d) != nsp:
        raise ShapeError(f"strides/pads/dilations need {nsp}/{2 * nsp}/{nsp} entries; got "
                         f"{len(s)}/{len(p)}/{len(d)}")
    return s, p[:nsp], p[nsp:], d


def _windows(x, kernel, s, pb, pe, d, fill=0.0, extra=None):
    """Strided windows of the padded input: shape (N, C, O..., K...)."""
    nsp = len(kernel)
    extra = extra or (0,) * nsp
    width = [(0, 0), (0, 0)] + [(pb[i], pe[i] + extra[i]) for i in range(nsp)]
    xp = np.pad(x, width, constant_values=fill) if any(map(any, width)) else x
    win = [(kernel[i] - 1) * d[i] + 1 for i in range(nsp)]
    v = sliding_window_view(xp, win, axis=tuple(range(2, 2 + nsp)))
    sl = (slice(None),) * 2 + tuple(slice(None, None, s[i]) for i in range(nsp)) + \
        tuple(slice(None, None, d[i]) for i in range(nsp))
    return v[sl]


def _col2im(cols, in_spatial, kernel, s, pb, pe, d):
    """Adjoint of ``_windows``: scatter-add (N, C, O..., K...) back to (N, C, *in_spatial)."""
    nsp = len(kernel)
    outsp = cols.shape[2:2 + nsp]
    full = [in_spatial[i] + pb[i] + pe[i] for i in range(nsp)]
    full = [max(full[i], (outsp[i] - 1) * s[i] + (kernel[i] - 1) * d[i] + 1)
            for i in range(nsp)]
    acc = np.zeros(cols.shape[:2] + tuple(full), dtype=cols.dtype)
    for k in itertools.product(*[range(n) for n in kernel]):
        sl = (slice(None),) * 2 + tuple(
            slice(k[i] * d[i], k[i] * d[i] + (outsp[i] - 1) * s[i] + 1, s[i])
            for i in range(nsp))
        acc[sl] += cols[(Ellipsis,) + k]
    crop = (slice(None),) * 2 + tuple(slice(pb[i], pb[i] + in_spatial[i]) for i in range(nsp))
    return acc[crop]


# -- conv ---------------------------------------------------------------------------------------

def _conv_out(i, k, s, pb, pe, d):
    return (i + pb + pe - ((k - 1) * d + 1)) // s + 1


def _conv_shape(attrs, ins, outs):
    x, w = ins[0], ins[1]
    if x is None or w is None:
        return ins, outs
    nsp = len(x) - 2
    s, pb, pe, d = _geometry(attrs, nsp)
    if x[1] != w[1] * attrs["groups"]:
        raise ShapeError(f"data channels {x[1]} != weight in-channels {w[1]} x groups "
                         f"{attrs['groups']}")
    o = tuple(_conv_out(x[2 + i], w[2 + i], s[i], pb[i], pe[i], d[i]) for i in range(nsp))
    if any(v <= 0 for v in o):
        raise ShapeError(f"output spatial size {o} is empty; input {x}, kernel {w[2:]}")
    new_ins = list(ins)
    if len(ins) > 2:
        new_ins[2] = (w[0],)
    return new_ins, [(x[0], w[0]) + o]


def _conv_ref(attrs, x, w, b=None):
    nsp = x.ndim - 2
    s, pb, pe, d = _geometry(attrs, nsp)
    g = attrs["groups"]
    n, c = x.shape[:2]
    co, cg, kk = w.shape[0], w.shape[1], w.shape[2:]
    acc = np.float64 if x.dtype == np.float64 else (
        np.float32 if x.dtype.kind == "f" else np.int64)
    v = _windows(x.astype(acc, copy=False), kk, s, pb, pe, d)
    osp = v.shape[2:2 + nsp]
    p, kn = int(np.prod(osp)), int(np.prod(kk))
    v = v.reshape((n, g, cg) + osp + kk)
    cols = np.moveaxis(v, (1, 2), (0, 2 + nsp)).reshape(g, n * p, cg * kn)
    wm = w.astype(acc, copy=False).reshape(g, co // g, cg * kn)
    out = np.matmul(cols, wm.transpose(0, 2, 1))  # g, n*p, co/g
    out = np.moveaxis(out.reshape((g, n) + osp + (co // g,)), (0, -1), (1, 2))
    out = out.reshape((n, co) + osp)
    if b is not None:
        out = out + b.reshape((1, -1) + (1,) * nsp)
    return out.astype(x.dtype, copy=False)


def _conv_backward_ref(attrs, og, x, w):
    nsp = x.ndim - 2
    s, pb, pe, d = _geometry(attrs, nsp)
    g = attrs["groups"]
    n = x.shape[0]
    co, cg, kk = w.shape[0], w.shape[1], w.shape[2:]
    osp = og.shape[2:]
    p, kn = int(np.prod(osp)), int(np.prod(kk))
    ogm = np.moveaxis(og.reshape((n, g, co // g) + osp), (1, 2), (0, -1)).reshape(g, n * p,
                                                                              co // g)
    wm = w.reshape(g, co // g, cg * kn)
    v = _windows(x, kk, s, pb, pe, d).reshape((n, g, cg) + osp + kk)
    cols = np.moveaxis(v, (1, 2), (0, 2 + nsp)).reshape(g, n * p, cg * kn)
    dw = np.matmul(ogm.transpose(0, 2, 1), cols).reshape(w.shape)
    dcols = np.matmul(ogm, wm).reshape((g, n) + osp + (cg,) + kk)
    dcols = np.moveaxis(dcols, (0, 2 + nsp), (1, 2)).reshape((n, g * cg) + osp + kk)
    dx = _col2im(dcols, x.shape[2:], kk, s, pb, pe, d)
    db = og.sum(axis=(0,) + tuple(range(2, og.ndim)))
    return to_dtype(dx, x), to_dtype(dw, w), to_dtype(db, og)


_CONV_PARAMS = [Param("strides", "ints", (), "per spatial axis (default 1)"),
                Param("pads", "ints", (), "(begin..., end...) (default 0)"),
                Param("dilations", "ints", (), "per spatial axis (default 1)"),
                Param("groups", "int", 1, "channel groups")]


def _conv_grad(n, og):
    node = make_node("_conv_backward", [og[0], n.inputs[0], n.inputs[1]],
                     {k: n.attrs[k] for k in ("strides", "pads", "dilations", "groups")})
    grads = [NodeEntry(node, i, 0) for i in range(2)]
    if n.attrs["use_bias"]:
        grads.append(NodeEntry(node, 2, 0))
    return grads


def _bias_inputs(base):
    return lambda attrs: list(base) + (["bias"] if attrs["use_bias"] else [])


defs.op_once("conv", doc="N-d convolution (cross-correlation), layout NC..., weight "
              "(C_out, C_in / groups, K...), ONNX Conv semantics.",
              inputs=_bias_inputs(("data", "weight")),
              params=_CONV_PARAMS + [Param("use_bias", "bool", False, "add a bias input")],
              shape=_conv_shape, dtype=same_dtype, reference=_conv_ref, gradient=_conv_grad,
              pattern=OUT_FUSE, support_level=2)
defs.op_once("_conv_backward", doc="Gradients of conv for data, weight and bias.",
              inputs=("out_grad", "data", "weight"),
              outputs=("data_grad", "weight_grad", "bias_grad"), params=_CONV_PARAMS,
              shape=lambda attrs, ins, outs: (ins, [ins[1], ins[2], None if ins[2] is None
                                                    else (ins[2][0],)]),
              dtype=lambda attrs, ins, outs: (ins, [ins[1], ins[2], ins[0]]),
              reference=_conv_backward_ref, pattern=OPAQUE)


# -- conv_transpose -----------------------------------------------------------------------------

def conv_transpose_pads(attrs, x, w):
    """(strides, pads before, pads after, dilations, output_padding) of an N-d conv_transpose
    with input shape ``x`` and weight shape ``w``, ``auto_pad``/``output_shape`` resolved.

    Public so kernel generators pad exactly as the reference kernel does.
    """
    nsp = len(x) - 2
    s = _spatial(attrs, "strides", nsp, 1)
    d = _spatial(attrs, "dilations", nsp, 1)
    op_ = _spatial(attrs, "output_padding", nsp, 0)
    k = w[2:]
    if attrs["output_shape"] is None and attrs["auto_pad"] not in ("SAME_UPPER", "SAME_LOWER"):
        p = _spatial(attrs, "pads", 2 * nsp, 0)
        return s, p[:nsp], p[nsp:], d, op_
    out = attrs["output_shape"] or tuple(x[2 + i] * s[i] for i in range(nsp))
    out = tuple(out)[-nsp:]
    total = [s[i] * (x[2 + i] - 1) + op_[i] + (k[i] - 1) * d[i] + 1 - out[i]
             for i in range(nsp)]
    if attrs["auto_pad"] == "SAME_UPPER":
        pb, pe = [t // 2 for t in total], [t - t // 2 for t in total]
    else:
        pb, pe = [t - t // 2 for t in total], [t // 2 for t in total]
    return s, tuple(pb), tuple(pe), d, op_


#: the former private spelling, still imported by nnvm_llvm.compiler.lowering_nn
_tconv_pads = conv_transpose_pads


def _tconv_shape(attrs, ins, outs):
    x, w = ins[0], ins[1]
    if x is None or w is None:
        return ins, outs
    nsp = len(x) - 2
    s, pb, pe, d, op_ = conv_transpose_pads(attrs, x, w)
    o = tuple(s[i] * (x[2 + i] - 1) + op_[i] + (w[2 + i] - 1) * d[i] + 1 - pb[i] - pe[i]
              for i in range(nsp))
    co = w[1] * attrs["groups"]
    new_ins = list(ins)
    if len(ins) > 2:
        new_ins[2] = (co,)
    return new_ins, [(x[0], co) + o]


def _tconv_ref(attrs, x, w, b=None):
    nsp = x.ndim - 2
    s, pb, pe, d, op_ = conv_transpose_pads(attrs, x.shape, w.shape)
    g = attrs["groups"]
    n, ci = x.shape[:2]
    cog, kk = w.shape[1], w.shape[2:]
    isp = x.shape[2:]
    p, kn = int(np.prod(isp)), int(np.prod(kk))
    acc = np.float64 if x.dtype == np.float64 else np.float32
    xm = np.moveaxis(x.astype(acc).reshape((n, g, ci // g) + isp), (1, 2), (0, -1))
    xm = xm.reshape(g, n * p, ci // g)
    wm = w.astype(acc).reshape(g, ci // g, cog * kn)
    cols = np.matmul(xm, wm).reshape((g, n) + isp + (cog,) + kk)
    cols = np.moveaxis(cols, (0, 2 + nsp), (1, 2)).reshape((n, g * cog) + isp + kk)
    full = tuple(s[i] * (isp[i] - 1) + (kk[i] - 1) * d[i] + 1 + op_[i] for i in range(nsp))
    y = _col2im(cols, full, kk, s, (0,) * nsp, (0,) * nsp, d)
    if min(pb + pe) < 0:  # negative pads (from output_shape) extend with zeros
        y = np.pad(y, [(0, 0)] * 2 + [(max(-pb[i], 0), max(-pe[i], 0)) for i in range(nsp)])
        full = y.shape[2:]
        pb, pe = tuple(max(v, 0) for v in pb), tuple(max(v, 0) for v in pe)
    crop = (slice(None),) * 2 + tuple(slice(pb[i], full[i] - pe[i]) for i in range(nsp))
    y = y[crop]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nsp)
    return y.astype(x.dtype, copy=False)


defs.op_once("conv_transpose", doc="N-d transposed convolution (ONNX ConvTranspose), weight "
              "(C_in, C_out / groups, K...); output_shape (spatial) derives the pads as ONNX.",
              inputs=_bias_inputs(("data", "weight")),
              params=_CONV_PARAMS + [
                  Param("output_padding", "ints", (), "extra size at the end per axis"),
                  Param("output_shape", "ints_or_none", None, "spatial output shape"),
                  Param("auto_pad", "str", "NOTSET", "how output_shape splits the padding",
                        ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")),
                  Param("use_bias", "bool", False, "add a bias input")],
              shape=_tconv_shape, dtype=same_dtype, reference=_tconv_ref, pattern=OUT_FUSE,
              support_level=2)


# -- pooling ------------------------------------------------------------------------------------

def _pool_geometry(attrs, spatial):
    k = tuple(attrs["kernel_shape"])
    nsp = len(k)
    if len(spatial) != nsp:
        raise ShapeError(f"kernel_shape {k} has {nsp} axes; the data has {len(spatial)} spatial")
    s, pb, pe, d = _geometry(attrs, nsp)
    out, extra = [], []
    for i in range(nsp):
        eff = (k[i] - 1) * d[i] + 1
        span = spatial[i] + pb[i] + pe[i] - eff
        o = (-(-span // s[i]) if attrs["ceil_mode"] else span // s[i]) + 1
        if attrs["ceil_mode"] and (o - 1) * s[i] >= spatial[i] + pb[i]:
            o -= 1  # the last window must start inside the input or its begin padding
        out.append(o)
        extra.append(max(0, (o - 1) * s[i] + eff - (spatial[i] + pb[i] + pe[i])))
    return k, s, pb, pe, d, tuple(out), tuple(extra)


def _pool_shape(attrs, ins, outs):
    x = ins[0]
    if x is None:
        return ins, outs
    o = _pool_geometry(attrs, x[2:])[5]
    if any(v <= 0 for v in o):
        raise ShapeError(f"pooled size {o} is empty for input {x}")
    shape = tuple(x[:2]) + o
    return ins, [shape] * len(outs)


def _max_pool_ref(attrs, x):
    k, s, pb, pe, d, o, extra = _pool_geometry(attrs, x.shape[2:])
    nsp = len(k)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    v = _windows(x, k, s, pb, pe, d, fill=low, extra=extra)
    flat = v.reshape(v.shape[:2 + nsp] + (-1,))
    if not attrs.get("with_indices", True):
        y = flat.max(axis=-1)
        return y.astype(x.dtype, copy=False), np.zeros(y.shape, np.int64)
    arg = flat.argmax(axis=-1)
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    koff = np.unravel_index(arg, k)
    coords = [np.arange(o[i]).reshape((-1,) + (1,) * (nsp - 1 - i)) * s[i] - pb[i]
              + koff[i] * d[i] for i in range(nsp)]
    sp = x.shape[2:]
    if attrs["storage_order"] == 1:
        lin = np.zeros_like(coords[0])
        for i in reversed(range(nsp)):
            lin = lin * sp[i] + coords[i]
    else:
        lin = np.ravel_multi_index(tuple(coords), sp, mode="wrap")
    nc = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * nsp)
    idx = nc * int(np.prod(sp)) + lin
    return y.astype(x.dtype, copy=False), idx.astype(np.int64)


def _counts(attrs, spatial, include_pad):
    k, s, pb, pe, d, o, extra = _pool_geometry(attrs, spatial)
    ones = np.ones((1, 1) + tuple(spatial))
    if include_pad:
        width = [(0, 0), (0, 0)] + [(pb[i], pe[i]) for i in range(len(k))]
        ones = np.pad(ones, width, constant_values=1.0)
        pb, pe = (0,) * len(k), (0,) * len(k)
    v = _windows(ones, k, s, pb, pe, d, fill=0.0, extra=extra)
    return v.reshape(v.shape[:2 + len(k)] + (-1,)).sum(axis=-1)


def _avg_pool_ref(attrs, x):
    k, s, pb, pe, d, o, extra = _pool_geometry(attrs, x.shape[2:])
    acc = np.float64 if x.dtype == np.float64 else np.float32
    v = _windows(x.astype(acc), k, s, pb, pe, d, fill=0.0, extra=extra)
    total = v.reshape(v.shape[:2 + len(k)] + (-1,)).sum(axis=-1)
    return (total / _counts(attrs, x.shape[2:], attrs["count_include_pad"])).astype(x.dtype)


def _lp_pool_ref(attrs, x):
    k, s, pb, pe, d, o, extra = _pool_geometry(attrs, x.shape[2:])
    p = attrs["p"]
    v = _windows(np.abs(x.astype(np.float64)) ** p, k, s, pb, pe, d, fill=0.0, extra=extra)
    return (v.reshape(v.shape[:2 + len(k)] + (-1,)).sum(axis=-1) ** (1.0 / p)).astype(x.dtype)


def _max_pool_backward_ref(attrs, og, x):
    # the gradient needs the argmax whatever the forward node skipped
    _, idx = _max_pool_ref({**attrs, "storage_order": 0, "with_indices": True}, x)
    out = np.zeros(x.size, dtype=og.dtype)
    np.add.at(out, idx.reshape(-1), og.reshape(-1))
    return out.reshape(x.shape)


def _avg_pool_backward_ref(attrs, og, x):
    k, s, pb, pe, d, o, extra = _pool_geometry(attrs, x.shape[2:])
    g = og / _counts(attrs, x.shape[2:], attrs["count_include_pad"])
    cols = np.broadcast_to(g.reshape(g.shape + (1,) * len(k)), g.shape + k)
    pe2 = tuple(pe[i] + extra[i] for i in range(len(k)))
    return to_dtype(_col2im(np.ascontiguousarray(cols), x.shape[2:], k, s, pb, pe2, d), og)


_POOL_PARAMS = [Param("kernel_shape", "ints", doc="window per spatial axis"),
                Param("strides", "ints", (), "per spatial axis (default 1)"),
                Param("pads", "ints", (), "(begin..., end...) (default 0)"),
                Param("dilations", "ints", (), "per spatial axis (default 1)"),
                Param("ceil_mode", "bool", False, "ceil instead of floor for the output size")]
_MAXP = _POOL_PARAMS + [Param("storage_order", "int", 0, "indices: 0 row-, 1 column-major"),
                        Param("with_indices", "bool", True,
                              "False: nothing reads the indices output, which is left zero "
                              "(the importer sets it for a one-output ONNX MaxPool: the "
                              "window max alone costs a fraction of the argmax)")]
_AVGP = _POOL_PARAMS + [Param("count_include_pad", "bool", False, "divide by the padded window")]


def _pool_grad(bname):
    def grad(n, og):
        return [NodeEntry(make_node(bname, [og[0], n.inputs[0]], dict(n.attrs)), 0, 0)]
    return grad


defs.op_once("max_pool", doc="N-d max pooling (ONNX MaxPool) with dilations, ceil_mode and the "
              "flat argmax indices as a hidden second output.", inputs=("data",),
              outputs=("output", "indices"), params=_MAXP, shape=_pool_shape,
              dtype=lambda attrs, ins, outs: (ins, [ins[0], "int64"]), reference=_max_pool_ref,
              gradient=_pool_grad("_max_pool_backward"), pattern=OUT_FUSE,
              FNumVisibleOutputs=lambda attrs: 1, support_level=2)
defs.op_once("avg_pool", doc="N-d average pooling (ONNX AveragePool).", inputs=("data",),
              params=_AVGP, shape=_pool_shape, dtype=same_dtype, reference=_avg_pool_ref,
              gradient=_pool_grad("_avg_pool_backward"), pattern=OUT_FUSE, support_level=2)
def _lp_pool_shape(attrs, ins, outs):
    """The pool shape, once p is a norm order: p = 0 took a 1/0 root (NaN on reference, a
    ZeroDivisionError in the llvm lowering; found by scripts/fuzz_onnx.py)."""
    if attrs["p"] < 1:
        raise AttrError(f"lp_pool: p must be a norm order of at least 1, got {attrs['p']}")
    return _pool_shape(attrs, ins, outs)


defs.op_once("lp_pool", doc="N-d Lp pooling (ONNX LpPool): (sum |x|^p)^(1/p) per window.",
              inputs=("data",), params=_POOL_PARAMS + [Param("p", "int", 2, "norm order")],
              shape=_lp_pool_shape, dtype=same_dtype, reference=_lp_pool_ref, pattern=OUT_FUSE,
              support_level=2)
defs.op_once("_max_pool_backward", doc="Gradient of max_pool: out_grad to each window's argmax.",
              inputs=("out_grad", "data"), params=_MAXP,
              shape=lambda attrs, ins, outs: (ins, [ins[1]]), dtype=same_dtype,
              reference=_max_pool_backward_ref, pattern=OPAQUE)
defs.op_once("_avg_pool_backward", doc="Gradient of avg_pool: out_grad spread over each window.",
              inputs=("out_grad", "data"), params=_AVGP,
              shape=lambda attrs, ins, outs: (ins, [ins[1]]), dtype=same_dtype,
              reference=_avg_pool_backward_ref, pattern=OPAQUE,
              FIgnoreInputs=lambda attrs: [1])


def _global_shape(attrs, ins, outs):
    x = ins[0]
    return (ins, outs) if x is None else (ins, [tuple(x[:2]) + (1,) * (len(x) - 2)])


def _global(name, doc, fn, params=()):
    defs.op_once(name, doc=doc, inputs=("data",), params=list(params), shape=_global_shape,
                  dtype=same_dtype, reference=lambda attrs, x: to_dtype(
                      fn(x, tuple(range(2, x.ndim)), attrs), x),
                  pattern=OpPattern.COMM_REDUCE, support_level=2)


_global("global_max_pool", "Maximum over all spatial axes (N-d).",
        lambda x, ax, a: x.max(axis=ax, keepdims=True))
_global("global_avg_pool", "Mean over all spatial axes (N-d).",
        lambda x, ax, a: x.mean(axis=ax, keepdims=True, dtype=np.float64))
_global("global_lp_pool", "Lp norm over all spatial axes (N-d).",
        lambda x, ax, a: (np.abs(x.astype(np.float64)) ** a["p"]).sum(
            axis=ax, keepdims=True) ** (1.0 / a["p"]), [Param("p", "int", 2, "norm order")])


# -- einsum, hardmax ----------------------------------------------------------------------------

def _einsum_shape(attrs, ins, outs):
    if any(s is None for s in ins):
        return ins, outs
    dummies = [np.broadcast_to(np.zeros((), np.int8), s) for s in ins]
    return ins, [np.einsum(attrs["equation"], *dummies).shape]


def _einsum_ref(attrs, *xs):
    # numpy's einsum has no bfloat16 loop: compute in float32 and cast back
    calc = [x.astype(np.float32) if x.dtype.name == "bfloat16" else x for x in xs]
    out = np.einsum(attrs["equation"].replace(" ", ""), *calc, optimize=len(xs) > 2)
    return np.asarray(out).astype(xs[0].dtype, copy=False)


defs.op_once("einsum", doc="Einstein summation over any number of inputs (ONNX Einsum).",
              inputs=lambda attrs: [f"arg{i}" for i in range(attrs["num_args"])],
              params=[Param("num_args", "int", doc="number of inputs"),
                      Param("equation", "str", doc="einsum subscripts, e.g. 'ij,jk->ik'")],
              shape=_einsum_shape, dtype=same_dtype,
              reference=_einsum_ref, pattern=OPAQUE, support_level=4)


def _hardmax_ref(attrs, x):
    ax = attrs["axis"] % x.ndim
    arg = np.expand_dims(x.argmax(axis=ax), ax)
    out = np.zeros_like(x)
    np.put_along_axis(out, arg, 1, axis=ax)
    return out


defs.op_once("hardmax", doc="1 at the first maximum along axis, 0 elsewhere (ONNX Hardmax).",
              inputs=("data",), params=[Param("axis", "int", -1, "axis")],
              shape=first_input_shape, dtype=same_dtype, reference=_hardmax_ref,
              pattern=OPAQUE, support_level=4)



