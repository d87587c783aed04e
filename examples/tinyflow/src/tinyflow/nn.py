"""``tf.nn``: layers and losses as NNVM symbols (TinyFlow's ``nn`` module).

Layers whose weights are not given create NNVM variables ``<name>_weight``/``<name>_bias``
whose shapes shape inference derives from the data (see ``infer_variable_shapes``). Window
arguments follow TensorFlow (``ksize=[1, kh, kw, 1]``, ``strides=[1, sh, sw, 1]``,
``padding='SAME'|'VALID'``) on NCHW data, TinyFlow's layout. ``SAME`` pads ``k - 1`` in total
(the extra cell at the bottom/right), which gives TensorFlow's output size ``ceil(in/stride)``.
"""

from __future__ import annotations

from typing import Sequence

from nnvm import symbol as _sym
from nnvm.errors import format_error
from nnvm.symbol import Symbol

from ._base import TinyFlowError, reduce_mean
from .ops import SPARSE_XENT

__all__ = ["conv2d", "max_pool", "avg_pool", "relu", "softmax", "log_softmax", "linear",
           "batch_normalization", "softmax_cross_entropy_with_logits",
           "sparse_softmax_cross_entropy_with_logits",
           "mean_sparse_softmax_cross_entropy_with_logits", "flatten_layer", "tanh", "sigmoid"]


def _hw(values: Sequence[int] | int | None, what: str, default: int | None = None
        ) -> tuple[int, int]:
    """(h, w) from TensorFlow's 4-vector [1, h, w, 1], a pair, or one int."""
    if values is None:
        if default is None:
            raise TinyFlowError(f"{what} is required (e.g. [1, 3, 3, 1])")
        return default, default
    if isinstance(values, int):
        return values, values
    v = [int(x) for x in values]
    if len(v) == 4:
        return v[1], v[2]
    if len(v) == 2:
        return v[0], v[1]
    raise TinyFlowError(format_error(what, "must have 4 (NHWC-style [1, h, w, 1]) or 2 values",
                                     got=values))


def _padding(padding: str, k: tuple[int, int]) -> tuple[int, int, int, int]:
    mode = str(padding).upper()
    if mode == "VALID":
        return (0, 0, 0, 0)
    if mode == "SAME":
        top, left = (k[0] - 1) // 2, (k[1] - 1) // 2
        return (top, left, k[0] - 1 - top, k[1] - 1 - left)
    raise TinyFlowError(format_error("padding", "unknown mode", "'SAME' or 'VALID'", padding))


def _check_layout(data_format: str) -> None:
    if data_format != "NCHW":
        raise TinyFlowError(format_error("data_format", "only NCHW is supported (TinyFlow's "
                                         "layout)", "'NCHW'", data_format,
                                         fix="Transpose the input to NCHW"))


def conv2d(input: Symbol, filter: Symbol | None = None, strides=(1, 1, 1, 1),
           padding: str = "SAME", data_format: str = "NCHW", num_filter: int | None = None,
           ksize=None, no_bias: bool = True, bias: Symbol | None = None,
           name: str | None = None) -> Symbol:
    """2-D convolution of NCHW ``input`` by an OIHW ``filter`` (created when omitted).

    Args:
        num_filter: output channels (required: NNVM's conv2d records it as an attribute).
        ksize: kernel size, ``[1, kh, kw, 1]`` or ``(kh, kw)``; from ``filter`` is not
            possible before shape inference, so it is required too.
        no_bias: TinyFlow's default True; False adds a per-channel bias ``<name>_bias``.
    """
    _check_layout(data_format)
    if num_filter is None:
        raise TinyFlowError("conv2d: num_filter is required (the number of output channels)")
    k = _hw(ksize, "conv2d: ksize")
    kwargs = {}
    if filter is not None:
        kwargs["weight"] = filter
    if bias is not None:
        kwargs["bias"] = bias
    return _sym.conv2d(input, channels=int(num_filter), kernel_size=k,
                       strides=_hw(strides, "conv2d: strides", 1), padding=_padding(padding, k),
                       use_bias=not no_bias or bias is not None, name=name, **kwargs)


def max_pool(value: Symbol, ksize, strides=None, padding: str = "VALID",
             data_format: str = "NCHW", name: str | None = None) -> Symbol:
    """Max pooling over ``ksize`` windows (strides default to the window size)."""
    _check_layout(data_format)
    k = _hw(ksize, "max_pool: ksize")
    s = _hw(strides, "max_pool: strides") if strides is not None else k
    return _sym.max_pool2d(value, pool_size=k, strides=s, padding=_padding(padding, k), name=name)


def avg_pool(value: Symbol, ksize, strides=None, padding: str = "VALID",
             data_format: str = "NCHW", name: str | None = None) -> Symbol:
    """Average pooling over ``ksize`` windows (padding cells are not counted)."""
    _check_layout(data_format)
    k = _hw(ksize, "avg_pool: ksize")
    s = _hw(strides, "avg_pool: strides") if strides is not None else k
    return _sym.avg_pool2d(value, pool_size=k, strides=s, padding=_padding(padding, k), name=name)


def relu(x: Symbol, name: str | None = None) -> Symbol:
    return _sym.relu(x, name=name)


def tanh(x: Symbol, name: str | None = None) -> Symbol:
    return _sym.tanh(x, name=name)


def sigmoid(x: Symbol, name: str | None = None) -> Symbol:
    return _sym.sigmoid(x, name=name)


def softmax(logits: Symbol, axis: int = -1, name: str | None = None) -> Symbol:
    return _sym.softmax(logits, axis=axis, name=name)


def log_softmax(logits: Symbol, axis: int = -1, name: str | None = None) -> Symbol:
    return _sym.log_softmax(logits, axis=axis, name=name)


def flatten_layer(x: Symbol, name: str | None = None) -> Symbol:
    """(N, d1, d2, ...) -> (N, d1*d2*...)."""
    return _sym.flatten(x, name=name)


def linear(data: Symbol, num_hidden: int, no_bias: bool = False, weight: Symbol | None = None,
           bias: Symbol | None = None, name: str | None = None) -> Symbol:
    """Fully connected layer ``data W^T + b`` (NNVM's dense); W is (num_hidden, in_dim)."""
    kwargs = {k: v for k, v in (("weight", weight), ("bias", bias)) if v is not None}
    return _sym.dense(data, units=int(num_hidden), use_bias=not no_bias, name=name, **kwargs)


def batch_normalization(x: Symbol, mean: Symbol | None = None, variance: Symbol | None = None,
                        offset: Symbol | None = None, scale: Symbol | None = None,
                        variance_epsilon: float = 1e-5, axis: int = 1,
                        name: str | None = None) -> Symbol:
    """Batch normalisation ``(x - mean) / sqrt(variance + eps) * scale + offset``.

    Without ``mean``/``variance`` it normalises with the statistics of the batch (training
    mode): they are computed in the graph and fed to NNVM's ``batch_norm`` as its moving
    statistics, whose gradient covers them, so the backward pass is the full training-mode
    gradient. ``scale``/``offset`` are created as ``<name>_gamma``/``<name>_beta`` when
    omitted (initialise them to ones and zeros).
    """
    if (mean is None) != (variance is None):
        raise TinyFlowError("batch_normalization: give both mean and variance, or neither "
                            "(batch statistics)")
    if mean is None:
        mean = _sym.mean(x, axis=(axis,), exclude=True)
        centered = _sym.broadcast_sub(x, _sym.expand_like(mean, x, axis=(axis,), exclude=True))
        variance = _sym.mean(_sym.elemwise_mul(centered, centered), axis=(axis,), exclude=True)
    kwargs = {k: v for k, v in (("gamma", scale), ("beta", offset)) if v is not None}
    return _sym.batch_norm(x, moving_mean=mean, moving_var=variance, axis=axis,
                           epsilon=float(variance_epsilon), name=name, **kwargs)


def softmax_cross_entropy_with_logits(logits: Symbol | None = None, labels: Symbol | None = None,
                                      axis: int = -1, name: str | None = None) -> Symbol:
    """Per-example ``-sum(labels * log_softmax(logits), axis)`` for probability labels."""
    if logits is None or labels is None:
        raise TinyFlowError("softmax_cross_entropy_with_logits: pass logits= and labels=")
    return _sym.negative(_sym.sum(_sym.elemwise_mul(labels, log_softmax(logits, axis)),
                                  axis=(axis,)), name=name)


def sparse_softmax_cross_entropy_with_logits(logits: Symbol | None = None,
                                             labels: Symbol | None = None,
                                             name: str | None = None) -> Symbol:
    """Per-example ``-log softmax(logits)[label]`` for integer class ``labels`` (...,)."""
    if logits is None or labels is None:
        raise TinyFlowError("sparse_softmax_cross_entropy_with_logits: pass logits= and "
                            "labels=")
    return getattr(_sym, SPARSE_XENT)(logits, labels, name=name)


def mean_sparse_softmax_cross_entropy_with_logits(logits: Symbol, labels: Symbol,
                                                  name: str | None = None) -> Symbol:
    """TinyFlow's fused loss: the batch mean of the sparse cross-entropy."""
    return reduce_mean(sparse_softmax_cross_entropy_with_logits(logits, labels), name=name)
