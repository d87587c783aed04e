"""Neural-network ONNX ops: convolutions, pooling, GEMM, normalisation, softmax, RNNs, Resize.

2-D convolutions and pools map to NNVM's ``conv2d``/``max_pool2d``/``avg_pool2d`` (the ops every
backend schedules well); 1-D and 3-D ones, dilated pools and pool indices use the N-d
``conv``/``max_pool``/``avg_pool`` family.
"""

from __future__ import annotations

import numpy as np

from ..errors import OnnxImportError, OnnxUnsupportedError, format_error
from ..registry import converter
from ..tensors import np_dtype, onnx_dtype_name
from .common import auto_pads, cast, norm_axis
from .tensor import reshape_to


def _spatial_attrs(ctx, x, kernel):
    n = len(kernel)
    strides = tuple(ctx.attr("strides", [1] * n))
    dilations = tuple(ctx.attr("dilations", [1] * n))
    pads = auto_pads(ctx, ctx.shape(x)[2:], kernel, strides, dilations,
                     ctx.attr("auto_pad", "NOTSET"))
    if pads is None:
        pads = tuple(ctx.attr("pads", [0] * (2 * n)))
    return strides, dilations, tuple(pads)


def _has_op(name):
    from nnvm.errors import OpNotFoundError
    from nnvm.op import get_op

    try:
        get_op(name)
        return True
    except OpNotFoundError:
        return False


@converter("Conv", requires=("conv2d",))
def _conv(ctx, node):
    x, w = ctx.input(0), ctx.input(1)
    wshape = ctx.shape(w)
    kernel = tuple(ctx.attr("kernel_shape", wshape[2:]))
    strides, dilations, pads = _spatial_attrs(ctx, x, kernel)
    groups = ctx.attr("group", 1)
    bias = ctx.input(2) if ctx.has_input(2) else None
    if len(kernel) == 2:
        ins = [x, w] + ([bias] if bias is not None else [])
        return [ctx.op("conv2d", *ins, channels=wshape[0], kernel_size=kernel, strides=strides,
                       padding=pads, dilation=dilations, groups=groups,
                       use_bias=bias is not None)]
    if len(kernel) == 1 and ctx.shape(x) is not None and len(ctx.shape(x)) == 3 and \
            ctx.dtype(x) == "float32":  # conv2d accumulates in its dtype; N-d conv in fp32
        return [_conv1d_as_2d(ctx, x, w, bias, wshape, kernel, strides, dilations, pads,
                              groups)]
    ins = [x, w] + ([bias] if bias is not None else [])
    return [ctx.op("conv", *ins, strides=strides, pads=pads, dilations=dilations,
                   groups=groups, use_bias=bias is not None)]


def _conv1d_as_2d(ctx, x, w, bias, wshape, kernel, strides, dilations, pads, groups):
    """A 1-D convolution as ``conv2d`` over a height-1 image.

    Why: every backend schedules ``conv2d`` (packed weights, register-blocked output
    channels) and only plainly loops the N-d ``conv``; audio models (STFT as a 1-D conv,
    wav2vec-style feature extractors, VAD encoders) spent most of their time there. The two
    reshapes are views, and a constant weight is reshaped here, at import.
    """
    n, c, width = (int(d) for d in ctx.shape(x))
    x4 = reshape_to(ctx, x, (n, c, 1, width))
    if ctx.is_const(1):
        w4 = ctx.constant(np.ascontiguousarray(ctx.const(1)).reshape(
            tuple(wshape[:2]) + (1, kernel[0])))
    else:
        w4 = reshape_to(ctx, w, tuple(wshape[:2]) + (1, kernel[0]))
    ins = [x4, w4] + ([bias] if bias is not None else [])
    y = ctx.op("conv2d", *ins, channels=wshape[0], kernel_size=(1, kernel[0]),
               strides=(1, strides[0]), padding=(0, pads[0], 0, pads[1]),
               dilation=(1, dilations[0]), groups=groups, use_bias=bias is not None)
    out_w = (width + pads[0] + pads[1] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    return reshape_to(ctx, y, (n, int(wshape[0]), out_w))


@converter("ConvTranspose", requires=("conv_transpose",))
def _conv_transpose(ctx, node):
    x, w = ctx.input(0), ctx.input(1)
    wshape = ctx.shape(w)
    kernel = tuple(ctx.attr("kernel_shape", wshape[2:]))
    n = len(kernel)
    strides = tuple(ctx.attr("strides", [1] * n))
    dilations = tuple(ctx.attr("dilations", [1] * n))
    output_padding = tuple(ctx.attr("output_padding", [0] * n))
    output_shape = ctx.attr("output_shape", None)
    groups = ctx.attr("group", 1)
    in_sp = ctx.shape(x)[2:]
    auto = ctx.attr("auto_pad", "NOTSET")
    pads = tuple(ctx.attr("pads", [0] * (2 * n)))
    if output_shape is not None:
        output_shape = tuple(output_shape)[-n:]
    if output_shape is not None:
        bias = ctx.input(2) if ctx.has_input(2) else None
        ins = [x, w] + ([bias] if bias is not None else [])
        return [ctx.op("conv_transpose", *ins, strides=strides, dilations=dilations,
                       groups=groups, output_padding=output_padding, output_shape=output_shape,
                       use_bias=bias is not None)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        target = output_shape or tuple(d * s for d, s in zip(in_sp, strides))
        begins, ends = [], []
        for i in range(n):
            total = strides[i] * (in_sp[i] - 1) + output_padding[i] + \
                ((kernel[i] - 1) * dilations[i] + 1) - target[i]
            total = max(total, 0)
            if auto == "SAME_UPPER" or (auto != "SAME_LOWER" and output_shape is not None):
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = tuple(begins) + tuple(ends)
    elif auto == "VALID":
        pads = (0,) * (2 * n)
    bias = ctx.input(2) if ctx.has_input(2) else None
    ins = [x, w] + ([bias] if bias is not None else [])
    return [ctx.op("conv_transpose", *ins, strides=strides, pads=pads, dilations=dilations,
                   groups=groups, output_padding=output_padding, use_bias=bias is not None)]


def _pool(kind):
    def convert(ctx, node):
        x = ctx.input(0)
        kernel = tuple(ctx.attr("kernel_shape"))
        strides, dilations, pads = _spatial_attrs(ctx, x, kernel)
        ceil = bool(ctx.attr("ceil_mode", 0))
        want_indices = ctx.num_outputs > 1 and node.output[1] != ""
        if kind == "lp":
            return [ctx.op("lp_pool", x, kernel_shape=kernel, strides=strides, pads=pads,
                           dilations=dilations, ceil_mode=ceil, p=ctx.attr("p", 2))]
        simple = len(kernel) == 2 and all(d == 1 for d in dilations) and not want_indices
        if kind == "max":
            if simple and ctx.attr("storage_order", 0) == 0:
                return [ctx.op("max_pool2d", x, pool_size=kernel, strides=strides,
                               padding=pads, ceil_mode=ceil)]
            outs = ctx.op_multi("max_pool", x, kernel_shape=kernel, strides=strides,
                                pads=pads, dilations=dilations, ceil_mode=ceil,
                                storage_order=ctx.attr("storage_order", 0),
                                with_indices=want_indices)
            return outs[:2] if want_indices else outs[:1]
        count = bool(ctx.attr("count_include_pad", 0))
        # with ceil_mode, ONNX divides a window hanging past the padded input by its cells
        # inside it; avg_pool2d (NNVM's own op) divides by the whole window, avg_pool as ONNX
        if simple and not (ceil and count):
            return [ctx.op("avg_pool2d", x, pool_size=kernel, strides=strides, padding=pads,
                           ceil_mode=ceil, count_include_pad=count)]
        return [ctx.op("avg_pool", x, kernel_shape=kernel, strides=strides, pads=pads,
                       dilations=dilations, ceil_mode=ceil, count_include_pad=count)]
    return convert


converter("MaxPool", requires=("max_pool2d",))(_pool("max"))
converter("AveragePool", requires=("avg_pool2d",))(_pool("avg"))
converter("LpPool", requires=("lp_pool",))(_pool("lp"))


def _global_pool(kind):
    def convert(ctx, node):
        x = ctx.input(0)
        rank = ctx.rank(x)
        if kind == "lp":
            return [ctx.op("global_lp_pool", x, p=ctx.attr("p", 2))]
        if rank == 4:
            return [ctx.op(f"global_{kind}_pool2d", x)]
        axes = tuple(range(2, rank))
        return [ctx.op("max" if kind == "max" else "mean", x, axis=axes, keepdims=True)]
    return convert


converter("GlobalMaxPool", requires=("global_max_pool2d",))(_global_pool("max"))
converter("GlobalAveragePool", requires=("global_avg_pool2d",))(_global_pool("avg"))
converter("GlobalLpPool", requires=("global_lp_pool",))(_global_pool("lp"))


@converter("MatMul", requires=("matmul",))
def _matmul(ctx, node):
    a, b = ctx.input(0), ctx.input(1)
    return [ctx.op("matmul", a, b)]


@converter("Gemm", requires=("matmul", "dense"))
def _gemm(ctx, node):
    a, b = ctx.input(0), ctx.input(1)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    ta, tb = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    c = ctx.input(2) if ctx.has_input(2) else None
    dt = np_dtype(ctx.dtype(a))
    if a.shape is not None and b.shape is not None and not ta and alpha == 1.0 and \
            (c is None or (beta == 1.0 and c.shape is not None and len(c.shape) == 1)) and \
            dt.kind == "f":
        w = b if tb else ctx.op("transpose", b, axes=(1, 0))
        units = ctx.shape(w)[0]
        if c is None or c.shape == (units,):
            ins = [a, w] + ([c] if c is not None else [])
            return [ctx.op("dense", *ins, units=units, use_bias=c is not None)]
    out = ctx.op("matmul", a, b, transpose_a=ta, transpose_b=tb)
    if alpha != 1.0:
        out = ctx.op("broadcast_mul", out, ctx.constant(np.array(alpha, dtype=dt)))
    if c is not None:
        if beta != 1.0:
            c = ctx.op("broadcast_mul", c, ctx.constant(np.array(beta, dtype=dt)))
        out = ctx.op("broadcast_add", out, c)
    return [out]


@converter("BatchNormalization", requires=("batch_norm",))
def _batch_norm(ctx, node):
    if ctx.attr("training_mode", 0) or (ctx.opset < 14 and ctx.num_outputs > 1 and
                                        any(node.output[1:])):
        raise OnnxUnsupportedError(format_error(ctx.where, "training-mode batch norm "
                                                "(running statistics outputs)",
                                                fix="Export the model in eval mode"))
    x = ctx.input(0)
    ins = [x] + [cast(ctx, ctx.input(i), ctx.dtype(x)) for i in range(1, 5)]
    return [ctx.op("batch_norm", *ins, epsilon=ctx.attr("epsilon", 1e-5), axis=1)]


@converter("InstanceNormalization", requires=("instance_norm",))
def _instance_norm(ctx, node):
    return [ctx.op("instance_norm", ctx.input(0), ctx.input(1), ctx.input(2),
                   epsilon=ctx.attr("epsilon", 1e-5))]


@converter("LayerNormalization", since=17, requires=("layer_norm",))
def _layer_norm(ctx, node):
    x = ctx.input(0)
    has_bias = ctx.has_input(2)
    ins = [x, ctx.input(1)] + ([ctx.input(2)] if has_bias else [])
    if ctx.attr("stash_type", 1) != 1:
        pass  # computed in float32/64 by the kernel either way
    outs = ctx.op_multi("layer_norm", *ins, axis=ctx.attr("axis", -1),
                        epsilon=ctx.attr("epsilon", 1e-5), use_bias=has_bias)
    return outs[:ctx.num_outputs]


@converter("GroupNormalization", since=18, requires=("group_norm",))
def _group_norm(ctx, node):
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    groups = ctx.attr("num_groups")
    if ctx.opset < 21:
        channels = ctx.shape(x)[1]
        rep = ctx.constant(np.repeat(np.arange(groups, dtype=np.int64), channels // groups))
        scale = ctx.op("gather", scale, rep, axis=0)
        bias = ctx.op("gather", bias, rep, axis=0)
    return [ctx.op("group_norm", x, scale, bias, num_groups=groups,
                   epsilon=ctx.attr("epsilon", 1e-5))]


@converter("LpNormalization", requires=("lp_normalization",))
def _lp_norm(ctx, node):
    return [ctx.op("lp_normalization", ctx.input(0), axis=ctx.attr("axis", -1),
                   p=ctx.attr("p", 2))]


@converter("MeanVarianceNormalization", requires=("mean_variance_normalization",))
def _mvn(ctx, node):
    return [ctx.op("mean_variance_normalization", ctx.input(0),
                   axes=tuple(ctx.attr("axes", [0, 2, 3])))]


@converter("LRN", requires=("lrn",))
def _lrn(ctx, node):
    return [ctx.op("lrn", ctx.input(0), size=ctx.attr("size"), alpha=ctx.attr("alpha", 1e-4),
                   beta=ctx.attr("beta", 0.75), bias=ctx.attr("bias", 1.0), axis=1)]


def _softmax(nnvm_op):
    def v1(ctx, node):
        x = ctx.input(0)
        shape = ctx.shape(x)
        axis = norm_axis(ctx, ctx.attr("axis", 1), len(shape))
        if axis == len(shape) - 1:
            return [ctx.op(nnvm_op, x, axis=-1)]
        flat = reshape_to(ctx, x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
        return [reshape_to(ctx, ctx.op(nnvm_op, flat, axis=1), shape)]

    def v13(ctx, node):
        x = ctx.input(0)
        return [ctx.op(nnvm_op, x, axis=norm_axis(ctx, ctx.attr("axis", -1), ctx.rank(x)))]
    return v1, v13


for _onnx, _nnvm in (("Softmax", "softmax"), ("LogSoftmax", "log_softmax"),
                     ("Hardmax", "hardmax")):
    _v1, _v13 = _softmax(_nnvm)
    converter(_onnx, requires=(_nnvm,))(_v1)
    converter(_onnx, since=13, requires=(_nnvm,))(_v13)


@converter("Einsum", requires=("einsum",))
def _einsum(ctx, node):
    vals = [ctx.input(i) for i in range(ctx.num_inputs)]
    return [ctx.op("einsum", *vals, equation=ctx.attr("equation"))]


@converter("Det", requires=("det",))
def _det(ctx, node):
    return [ctx.op("det", ctx.input(0))]


def _rnn(kind):
    def convert(ctx, node):
        x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
        attrs = dict(hidden_size=ctx.attr("hidden_size", None) or ctx.shape(r)[-1],
                     direction=ctx.attr("direction", "forward"),
                     activations=tuple(ctx.attr("activations", [])),
                     activation_alpha=tuple(ctx.attr("activation_alpha", [])),
                     activation_beta=tuple(ctx.attr("activation_beta", [])),
                     clip=float(ctx.attr("clip", 0.0)), layout=ctx.attr("layout", 0))
        ins = [x, w, r]
        optional = [(3, "use_bias"), (4, "use_sequence_lens"), (5, "use_initial_h")]
        if kind == "lstm":
            optional += [(6, "use_initial_c"), (7, "use_peepholes")]
            attrs["input_forget"] = bool(ctx.attr("input_forget", 0))
        if kind == "gru":
            attrs["linear_before_reset"] = bool(ctx.attr("linear_before_reset", 0))
        for i, flag in optional:
            present = ctx.has_input(i)
            attrs[flag] = present
            if present:
                v = ctx.input(i)
                ins.append(cast(ctx, v, "int32") if flag == "use_sequence_lens" else v)
        outs = ctx.op_multi(kind, *ins, **attrs)
        return outs[:ctx.num_outputs]
    return convert


converter("LSTM", requires=("lstm",))(_rnn("lstm"))
converter("GRU", requires=("gru",))(_rnn("gru"))
converter("RNN", requires=("rnn",))(_rnn("rnn"))


def _resize_common(ctx):
    return dict(mode=ctx.attr("mode", "nearest"),
                coordinate_transformation_mode=ctx.attr("coordinate_transformation_mode",
                                                        "half_pixel"),
                nearest_mode=ctx.attr("nearest_mode", "round_prefer_floor"),
                cubic_coeff_a=ctx.attr("cubic_coeff_a", -0.75),
                exclude_outside=bool(ctx.attr("exclude_outside", 0)),
                extrapolation_value=ctx.attr("extrapolation_value", 0.0))


@converter("Resize", since=10, requires=("resize",))
def _resize_v10(ctx, node):
    scales = tuple(float(s) for s in ctx.const(1).reshape(-1))
    return [ctx.op("resize", ctx.input(0), scales=scales, mode=ctx.attr("mode", "nearest"),
                   coordinate_transformation_mode="asymmetric", nearest_mode="floor")]


@converter("Resize", since=11, requires=("resize",))
def _resize_v11(ctx, node):
    attrs = _resize_common(ctx)
    if ctx.opset >= 18:
        attrs["antialias"] = bool(ctx.attr("antialias", 0))
        attrs["keep_aspect_ratio_policy"] = ctx.attr("keep_aspect_ratio_policy", "stretch")
        axes = ctx.attr("axes", None)
        if axes is not None:
            attrs["axes"] = tuple(int(a) % ctx.rank(0) for a in axes)
    roi = ctx.const(1, None)
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        if roi is None or not roi.size:  # onnxruntime's default: every axis whole, [0, 1]
            n = len(attrs.get("axes") or range(ctx.rank(0)))
            roi = np.array([0.0] * n + [1.0] * n)
        attrs["roi"] = tuple(float(v) for v in roi.reshape(-1))
    scales = ctx.const(2, None)
    sizes = ctx.const(3, None)
    if sizes is not None and sizes.size:
        attrs["sizes"] = tuple(int(v) for v in sizes.reshape(-1))
    elif scales is not None and scales.size:
        attrs["scales"] = tuple(float(v) for v in scales.reshape(-1))
    else:
        raise OnnxImportError(format_error(ctx.where, "needs scales or sizes"))
    return [ctx.op("resize", ctx.input(0), **attrs)]


@converter("Upsample", requires=("resize",))
def _upsample(ctx, node):
    scales = ctx.attr("scales", None) if ctx.opset < 9 else \
        [float(s) for s in ctx.const(1).reshape(-1)]
    mode = ctx.attr("mode", "nearest")
    return [ctx.op("resize", ctx.input(0), scales=tuple(float(s) for s in scales),
                   mode="linear" if mode in ("linear", "bilinear") else mode,
                   coordinate_transformation_mode="asymmetric", nearest_mode="floor")]


@converter("NonMaxSuppression", requires=("non_max_suppression",))
def _nms(ctx, node):
    def scalar(i, default, kind):
        v = ctx.const(i, None)
        return default if v is None or np.asarray(v).size == 0 else \
            kind(np.asarray(v).reshape(-1)[0])
    return [ctx.op("non_max_suppression", ctx.input(0), ctx.input(1),
                   max_output_boxes_per_class=scalar(2, 0, int),
                   iou_threshold=scalar(3, 0.0, float), score_threshold=scalar(4, None, float),
                   center_point_box=ctx.attr("center_point_box", 0))]


@converter("RoiAlign", requires=("roi_align",))
def _roi_align(ctx, node):
    attrs = dict(mode=ctx.attr("mode", "avg"), output_height=ctx.attr("output_height", 1),
                 output_width=ctx.attr("output_width", 1),
                 sampling_ratio=ctx.attr("sampling_ratio", 0),
                 spatial_scale=ctx.attr("spatial_scale", 1.0))
    if ctx.opset >= 16:
        attrs["coordinate_transformation_mode"] = ctx.attr("coordinate_transformation_mode",
                                                           "half_pixel")
    else:
        attrs["coordinate_transformation_mode"] = "output_half_pixel"
    return [ctx.op("roi_align", ctx.input(0), ctx.input(1), cast(ctx, ctx.input(2), "int64"),
                   **attrs)]


@converter("MaxRoiPool", requires=("max_roi_pool",))
def _max_roi_pool(ctx, node):
    return [ctx.op("max_roi_pool", ctx.input(0), ctx.input(1),
                   pooled_shape=tuple(ctx.attr("pooled_shape")),
                   spatial_scale=ctx.attr("spatial_scale", 1.0))]


def _zero_point(ctx, i, like_dtype="uint8"):
    if ctx.has_input(i):
        return ctx.input(i)
    return ctx.constant(np.zeros((), dtype=np_dtype(like_dtype)))


@converter("QuantizeLinear", requires=("quantize_linear",))
def _quantize(ctx, node):
    out_dtype = ctx.attr("output_dtype", 0)
    zp_dtype = onnx_dtype_name(out_dtype, ctx.where) if out_dtype else "uint8"
    zp = _zero_point(ctx, 2, zp_dtype)
    attrs = dict(axis=ctx.attr("axis", 1), saturate=bool(ctx.attr("saturate", 1)),
                 block_size=ctx.attr("block_size", 0))
    return [ctx.op("quantize_linear", ctx.input(0), ctx.input(1), zp, **attrs)]


@converter("DequantizeLinear", requires=("dequantize_linear",))
def _dequantize(ctx, node):
    zp = _zero_point(ctx, 2, ctx.dtype(0))
    return [ctx.op("dequantize_linear", ctx.input(0), ctx.input(1), zp,
                   axis=ctx.attr("axis", 1), block_size=ctx.attr("block_size", 0))]


@converter("DynamicQuantizeLinear", requires=("dynamic_quantize_linear",))
def _dyn_quantize(ctx, node):
    return ctx.op_multi("dynamic_quantize_linear", ctx.input(0))


@converter("MatMulInteger", requires=("matmul_integer",))
def _matmul_integer(ctx, node):
    a, b = ctx.input(0), ctx.input(1)
    return [ctx.op("matmul_integer", a, b, _zero_point(ctx, 2, ctx.dtype(a)),
                   _zero_point(ctx, 3, ctx.dtype(b)))]


@converter("QLinearMatMul", requires=("qlinear_matmul",))
def _qlinear_matmul(ctx, node):
    return [ctx.op("qlinear_matmul", *[ctx.input(i) for i in range(8)])]


@converter("ConvInteger", requires=("conv_integer",))
def _conv_integer(ctx, node):
    x, w = ctx.input(0), ctx.input(1)
    kernel = tuple(ctx.attr("kernel_shape", ctx.shape(w)[2:]))
    strides, dilations, pads = _spatial_attrs(ctx, x, kernel)
    return [ctx.op("conv_integer", x, w, _zero_point(ctx, 2, ctx.dtype(x)),
                   _zero_point(ctx, 3, ctx.dtype(w)), strides=strides, pads=pads,
                   dilations=dilations, groups=ctx.attr("group", 1))]


@converter("QLinearConv", requires=("qlinear_conv",))
def _qlinear_conv(ctx, node):
    x, w = ctx.input(0), ctx.input(3)
    kernel = tuple(ctx.attr("kernel_shape", ctx.shape(w)[2:]))
    strides, dilations, pads = _spatial_attrs(ctx, x, kernel)
    ins = [ctx.input(i) for i in range(8)]
    if ctx.has_input(8):
        ins.append(ctx.input(8))
    return [ctx.op("qlinear_conv", *ins, strides=strides, pads=pads, dilations=dilations,
                   groups=ctx.attr("group", 1), use_bias=ctx.has_input(8))]


@converter("GridSample", since=16, requires=("grid_sample",))
def _grid_sample(ctx, node):
    mode = ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return [ctx.op("grid_sample", ctx.input(0), cast(ctx, ctx.input(1), ctx.dtype(0)),
                   mode=mode, padding_mode=ctx.attr("padding_mode", "zeros"),
                   align_corners=bool(ctx.attr("align_corners", 0)))]


@converter("Col2Im", since=18, requires=("col2im",))
def _col2im(ctx, node):
    def ints(i):
        return tuple(int(v) for v in np.asarray(ctx.const(i)).reshape(-1))
    return [ctx.op("col2im", ctx.input(0), image_shape=ints(1), block_shape=ints(2),
                   dilations=tuple(ctx.attr("dilations", [])), pads=tuple(ctx.attr("pads", [])),
                   strides=tuple(ctx.attr("strides", [])))]


@converter("MaxUnpool", since=9, requires=("max_unpool", "pad"))
def _max_unpool(ctx, node):
    """Scatter into the shape MaxPool came from; a larger output_shape pads at the end."""
    x = ctx.input(0)
    shape = ctx.shape(x)
    kernel = ctx.attr("kernel_shape")
    n = len(kernel)
    strides = ctx.attr("strides", [1] * n)
    pads = ctx.attr("pads", [0] * (2 * n))
    inferred = tuple(shape[:2]) + tuple(
        (shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n] for i in range(n))
    y = ctx.op("max_unpool", x, cast(ctx, ctx.input(1), "int64"), output_shape=inferred)
    if ctx.has_input(2):
        out = tuple(int(v) for v in np.asarray(ctx.const(2)).reshape(-1))
        if out != inferred:
            y = ctx.op("pad", y, pad_width=tuple((0, o - i) for o, i in zip(out, inferred)))
    return [y]
