"""The one op case table of the conformance suite: every case any backend suite used.

Three sources, merged into :data:`CASES` (``[Case]``):

- the forward ``CASES`` (``nnvm.testing.OpCase``) of tests/core/test_ops_{elemwise,nn,reduce,
  transform}.py, which the core tests also check against independent NumPy formulas, each in
  float32 and float64;
- :data:`LOWERING` and :data:`VARIANTS`: the cases first written for the llvm lowering rules
  (ONNX-family math, indexing, nn-in-ONNX-form ops, attribute variants of the heavy ops) and
  cases for ops no backend lowers yet (their host fallback is checked the same way), kept
  here as data: shapes (or arrays used as given), attributes, which inputs are params (so
  weight-packing paths run), value range and input dtypes;
- :func:`_op_cases`: hand-written cases for the ops whose attributes or inputs a shape list
  cannot express (recurrent layers, ai.onnx.ml models, detection, quantised, layout, signal,
  string and data-dependent-shape ops, and the example plugins' ops).

Every case is materialised once (seeded), so every target sees the same arrays.
:data:`GAPS` records the cases a target is known to get wrong, with why.
"""

from __future__ import annotations

import importlib.util
import pathlib
from dataclasses import dataclass, field

import numpy as np

CORE = pathlib.Path(__file__).resolve().parents[1] / "core"
FAMILIES = ("elemwise", "nn", "reduce", "transform")


@dataclass
class Case:
    """One op invocation: ``arrays`` feed the op's inputs in order; ``params`` are the indices
    bound as build-time params; ``rtol`` widens the per-dtype tolerance for this case."""

    op: str
    id: str
    attrs: dict
    arrays: list = field(default_factory=list)
    params: tuple = ()
    rtol: float = 0.0
    #: a module the case needs beyond core (the plugin that provides the op, an optional
    #: library its kernel uses); the case exists only where it is importable
    needs: str = ""


def _core_module(family):
    path = CORE / f"test_ops_{family}.py"
    spec = importlib.util.spec_from_file_location(f"_conformance_cases_{family}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _core_cases() -> list[Case]:
    """Each core case in float32 and, as ``<id>-f64``, in float64 (the codegen backends
    render both; the per-dtype tolerances tell them apart)."""
    return [Case(c.op, f"{family}{k}{suffix}", dict(c.attrs), c.arrays(dtype), (), c.rtol)
            for family in FAMILIES for k, c in enumerate(_core_module(family).CASES)
            for dtype, suffix in (("float32", ""), ("float64", "-f64"))]


# -- lowering-rule cases: op -> (input shapes, attrs, param indices, value range[, dtypes]) ---
X = (2, 3, 4, 5)
UNARY_POS = ("log", "sqrt", "reciprocal")
LOWERING: dict[str, tuple] = {
    "dense": ([(3, 16), (32, 16), (32,)], {"units": 32}, (1, 2), None),
    "matmul": ([(2, 4, 5), (2, 5, 3)], {}, (), None),
    "conv2d": ([(1, 3, 9, 9), (16, 3, 3, 3), (16,)],
               {"channels": 16, "kernel_size": (3, 3), "padding": (1, 1)}, (1, 2), None),
    "max_pool2d": ([(1, 4, 9, 9)], {"pool_size": (3, 3), "strides": (2, 2),
                                    "padding": (1, 1), "ceil_mode": True}, (), None),
    "avg_pool2d": ([(1, 4, 8, 8)], {"pool_size": (3, 3), "strides": (2, 2),
                                    "padding": (1, 1)}, (), None),
    "global_max_pool2d": ([(2, 4, 5, 6)], {}, (), None),
    "global_avg_pool2d": ([(2, 4, 5, 6)], {}, (), None),
    "softmax": ([(4, 33)], {"axis": -1}, (), None),
    "log_softmax": ([(3, 4, 5)], {"axis": 1}, (), None),
    "sum": ([X], {"axis": (1, 3)}, (), None),
    "mean": ([X], {"axis": (2,), "keepdims": True}, (), None),
    "max": ([X], {"axis": (0,), "exclude": True}, (), None),
    "min": ([X], {}, (), None),
    "prod": ([(3, 4)], {"axis": (1,)}, (), (0.5, 1.5)),
    "reshape": ([X], {"shape": (6, -1)}, (), None),
    "flatten": ([X], {}, (), None),
    "expand_dims": ([(3, 4)], {"axis": 1, "num_newaxis": 2}, (), None),
    "squeeze": ([(3, 1, 4, 1)], {}, (), None),
    "reshape_like": ([(3, 4), (2, 6)], {}, (), None),
    "transpose": ([X], {"axes": (0, 2, 3, 1)}, (), None),
    "concatenate": ([(2, 3), (2, 5)], {"axis": 1, "num_args": 2}, (), None),
    "broadcast_to": ([(3, 1)], {"shape": (3, 4)}, (), None),
    "pad": ([(2, 3)], {"pad_width": ((1, 0), (2, 1)), "pad_value": 1.5}, (), None),
    "leaky_relu": ([X], {"alpha": 0.1}, (), None),
    "clip": ([X], {"a_min": -0.5, "a_max": 0.5}, (), None),
    "cast": ([X], {"dtype": "float64"}, (), None),
    "elemwise_sum": ([X, X, X], {"num_args": 3}, (), None),
    "where": ([(3, 4), (3, 4), (3, 4)], {}, (), None, {0: "bool"}),
}
for _op in ("elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"):
    LOWERING[_op] = ([X, X], {}, (), (0.5, 2.0))
for _op in ("broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
            "broadcast_pow", "broadcast_maximum", "broadcast_minimum"):
    LOWERING[_op] = ([(2, 3, 4), (3, 1)], {}, (), (0.5, 2.0))
for _op in ("__add_scalar__", "__sub_scalar__", "__rsub_scalar__", "__mul_scalar__",
            "__div_scalar__", "__rdiv_scalar__", "__pow_scalar__", "__rpow_scalar__"):
    LOWERING[_op] = ([X], {"scalar": 1.5}, (), (0.5, 2.0))
for _op in ("relu", "tanh", "sigmoid", "exp", "log", "sqrt", "erf", "sin", "cos", "floor",
            "ceil", "round", "trunc", "negative", "abs", "reciprocal", "sign", "softplus",
            "softsign", "copy", "block_grad", "dropout", "zeros_like", "ones_like"):
    LOWERING[_op] = ([X], {}, (), (0.1, 3.0) if _op in UNARY_POS else None)
for _op in ("tan", "atan", "sinh", "cosh", "asinh", "hard_swish", "mish", "elu", "selu",
            "celu", "swish", "isnan", "isinf"):
    LOWERING[_op] = ([X], {}, (), (-3.0, 3.0))
for _op in ("asin", "acos", "atanh"):
    LOWERING[_op] = ([X], {}, (), (-0.9, 0.9))
LOWERING["acosh"] = ([X], {}, (), (1.1, 3.0))
LOWERING["hard_sigmoid"] = ([X], {"alpha": 0.3, "beta": 0.4}, (), (-4.0, 4.0))
LOWERING["thresholded_relu"] = ([X], {"alpha": 0.5}, (), None)
LOWERING["shrink"] = ([X], {"bias": 0.2, "lambd": 0.6}, (), None)
LOWERING["gelu"] = ([X], {}, (), (-3.0, 3.0))
LOWERING["prelu"] = ([X, (3, 1, 1)], {}, (1,), None)
LOWERING["logical_not"] = ([X], {}, (), None, {0: "bool"})
LOWERING["bitwise_not"] = ([X], {}, (), (-50, 50), {0: "int32"})
for _op in ("broadcast_equal", "broadcast_not_equal", "broadcast_greater",
            "broadcast_greater_equal", "broadcast_less", "broadcast_less_equal"):
    LOWERING[_op] = ([(2, 3, 4), (3, 1)], {}, (), (0, 3), {0: "int32", 1: "int32"})
for _op in ("logical_and", "logical_or", "logical_xor"):
    LOWERING[_op] = ([(2, 3, 4), (3, 1)], {}, (), None, {0: "bool", 1: "bool"})
for _op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    LOWERING[_op] = ([(2, 3, 4), (3, 1)], {}, (), (-100, 100), {0: "int32", 1: "int32"})
for _op in ("broadcast_left_shift", "broadcast_right_shift"):
    LOWERING[_op] = ([(2, 3, 4), (3, 1)], {}, (), (0, 8), {0: "uint32", 1: "uint32"})
LOWERING["broadcast_mod"] = ([(2, 3, 4), (3, 1)], {}, (), (-4.0, 4.0))
LOWERING["broadcast_fmod"] = ([(2, 3, 4), (3, 1)], {}, (), (-4.0, 4.0))
LOWERING["take"] = ([(4, 5), (2, 3)], {"axis": 1}, (), (-2, 7), {1: "int32"})
LOWERING["gather"] = ([(4, 5, 2), (3,)], {"axis": 0}, (), (-4, 4), {1: "int64"})
LOWERING["gather_elements"] = ([(3, 4), (3, 2)], {"axis": 1}, (), (-4, 4), {1: "int64"})
LOWERING["gather_nd"] = ([(3, 4, 2), (5, 2)], {}, (), (0, 3), {1: "int64"})
LOWERING["strided_slice"] = ([(5, 6, 3)], {"begin": (1, -1), "end": (4, 0),
                                           "stride": (2, -2)}, (), None)
LOWERING["split"] = ([(2, 6, 3)], {"indices_or_sections": (1, 4), "axis": 1}, (), None)
LOWERING["_split_like"] = ([(2, 6), (2, 2), (2, 4)], {"num_outputs": 2, "axis": 1}, (), None)
LOWERING["tile"] = ([(2, 3)], {"reps": (2, 3)}, (), None)
LOWERING["expand"] = ([(3, 1)], {"shape": (2, 1, 4)}, (), None)
LOWERING["expand_like"] = ([(3,), (3, 4)], {"axis": (1,)}, (), None)
LOWERING["trilu"] = ([(2, 4, 5)], {"upper": False, "k": 1}, (), None)
LOWERING["one_hot"] = ([(2, 3), (2,)], {"depth": 5, "axis": 1}, (), (-5, 5),
                       {0: "int64", 1: "float32"})
LOWERING["depth_to_space"] = ([(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}, (), None)
LOWERING["space_to_depth"] = ([(1, 2, 4, 6)], {"blocksize": 2}, (), None)
LOWERING["arange"] = ([], {"start": 1.0, "stop": 7.0, "step": 1.5}, (), None)
LOWERING["eye_like"] = ([(3, 5)], {"k": 1}, (), None)
LOWERING["cast_like"] = ([X, (2,)], {}, (), (-3.0, 3.0), {1: "int32"})
LOWERING["collapse_sum_like"] = ([(2, 3, 4), (3, 1)], {}, (), None)
LOWERING["argmax"] = ([X], {"axis": (2,), "keepdims": True}, (), (0, 3), {0: "int32"})
LOWERING["argmin"] = ([X], {"axis": (1,)}, (), None)
LOWERING["cumsum"] = ([(3, 5)], {"axis": 1, "exclusive": True}, (), None)
LOWERING["cumprod"] = ([(3, 5)], {"axis": 0, "reverse": True}, (), (0.5, 1.5))
LOWERING["conv"] = ([(1, 4, 7, 6), (6, 2, 3, 2), (6,)],
                    {"strides": (2, 1), "pads": (1, 0, 1, 1), "dilations": (1, 2), "groups": 2,
                     "use_bias": True}, (1, 2), None)
LOWERING["conv_transpose"] = ([(1, 4, 3, 4), (4, 3, 3, 2)],
                              {"strides": (2, 3), "pads": (1, 0, 0, 1), "groups": 2}, (1,), None)
LOWERING["max_pool"] = ([(1, 3, 7, 8)], {"kernel_shape": (3, 2), "strides": (2, 2),
                                         "pads": (1, 0, 1, 1), "ceil_mode": True}, (), None)
LOWERING["avg_pool"] = ([(1, 3, 7, 8)], {"kernel_shape": (3, 3), "strides": (2, 2),
                                         "pads": (1, 1, 1, 1)}, (), None)
LOWERING["lp_pool"] = ([(1, 2, 9)], {"kernel_shape": (3,), "strides": (2,), "p": 3}, (), None)
LOWERING["global_max_pool"] = ([(2, 3, 4, 2, 3)], {}, (), None)
LOWERING["global_avg_pool"] = ([(2, 3, 7)], {}, (), None)
LOWERING["global_lp_pool"] = ([(2, 3, 4, 5)], {"p": 2}, (), None)
LOWERING["batch_norm"] = ([(2, 3, 4, 5), (3,), (3,), (3,), (3,)], {"epsilon": 1e-3},
                          (1, 2, 3, 4), (0.5, 2.0))
LOWERING["layer_norm"] = ([(2, 3, 8), (3, 8), (3, 8)], {"axis": 1}, (1, 2), None)
LOWERING["rms_norm"] = ([(2, 3, 8), (8,)], {"axis": -1}, (1,), None)
LOWERING["instance_norm"] = ([(2, 3, 4, 5), (3,), (3,)], {}, (1, 2), None)
LOWERING["group_norm"] = ([(2, 4, 3, 5), (4,), (4,)], {"num_groups": 2}, (1, 2), None)
LOWERING["lp_normalization"] = ([(3, 4, 5)], {"axis": 1, "p": 1}, (), None)
LOWERING["mean_variance_normalization"] = ([X], {}, (), None)
LOWERING["lrn"] = ([(2, 5, 3, 3)], {"size": 3, "alpha": 0.01}, (), None)
LOWERING["hardmax"] = ([(3, 4, 5)], {"axis": 1}, (), (0, 3), {0: "int32"})
LOWERING["det"] = ([(2, 3, 3)], {}, (), None)
# -- ops with a reference kernel and no lowering rule yet: their fallback is checked too ----
for _op in ("sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "erf", "gelu", "reciprocal",
            "softplus", "softsign", "swish", "mish", "elu", "selu", "celu", "hard_sigmoid",
            "hard_swish", "shrink", "thresholded_relu"):
    LOWERING[f"_{_op}_backward"] = ([X, X], {}, (), (0.5, 2.0))
for _op in ("asin", "acos", "atanh"):
    LOWERING[f"_{_op}_backward"] = ([X, X], {}, (), (-0.9, 0.9))
LOWERING["_acosh_backward"] = ([X, X], {}, (), (1.1, 3.0))
LOWERING["device_copy"] = ([X], {}, (), None)
LOWERING["_assign"] = ([(3, 4), (3, 4)], {}, (), None)
LOWERING["topk"] = ([(3, 6)], {"k": 2}, (), None)
LOWERING["reverse_sequence"] = ([(4, 3, 2), (3,)], {"time_axis": 0, "batch_axis": 1}, (),
                                (1, 5), {1: "int64"})
LOWERING["dequantize_linear"] = ([(3, 4), (), ()], {}, (), (-50, 50),
                                 {0: "int8", 2: "int8"})
LOWERING["binarizer"] = ([X], {}, (), None)
LOWERING["normalizer"] = ([(3, 5)], {}, (), None)
LOWERING["scaler"] = ([(3, 5)], {}, (), None)
LOWERING["bitcast"] = ([(3, 4)], {"dtype": "int32"}, (), None)
LOWERING["einsum"] = ([(2, 3), (3, 4)], {"equation": "ij,jk->ik", "num_args": 2}, (), None)
LOWERING["grid_sample"] = ([(1, 2, 4, 4), (1, 3, 3, 2)], {}, (), (-1.0, 1.0))
LOWERING["quantize_linear"] = ([(3, 4), (), ()], {}, (), (0.5, 2.0), {2: "int8"})
LOWERING["matmul_integer"] = ([(3, 4), (4, 5), (), ()], {}, (), (-5, 5),
                              {0: "int8", 1: "int8", 2: "int8", 3: "int8"})
LOWERING["array_feature_extractor"] = ([(3, 5), (2,)], {}, (), (0, 5), {1: "int64"})
LOWERING["_tile_backward"] = ([(4, 9), (2, 3)], {"reps": (2, 3)}, (), None)
LOWERING["_gather_backward"] = ([(3, 5, 2), (3,), (4, 5, 2)], {"axis": 0}, (), (-4, 4),
                                {1: "int64"})
LOWERING["_layer_norm_backward"] = ([(2, 3, 8), (2, 3, 8), (8,)], {"axis": -1}, (), None)
LOWERING["_prelu_backward"] = ([X, X, (3, 1, 1)], {}, (), None)
LOWERING["_max_pool_backward"] = ([(1, 2, 2, 2), (1, 2, 4, 4)],
                                  {"kernel_shape": (2, 2), "strides": (2, 2)}, (), None)
LOWERING["_avg_pool_backward"] = ([(1, 2, 2, 2), (1, 2, 4, 4)],
                                  {"kernel_shape": (2, 2), "strides": (2, 2)}, (), None)
LOWERING["scatter_elements"] = ([(3, 4), np.array([[0, 2], [1, 3], [3, 0]]), (3, 2)],
                                {"axis": 1}, (), None)
LOWERING["scatter_nd"] = ([(4, 3), np.array([[1], [3]]), (2, 3)], {}, (), None)
LOWERING["dft"] = ([(1, 8, 1)], {}, (), None)
LOWERING["conv_integer"] = ([(1, 2, 5, 5), (3, 2, 3, 3), (), ()], {}, (), (-5, 5),
                            {0: "int8", 1: "int8", 2: "int8", 3: "int8"})
LOWERING["_conv_backward"] = ([(1, 3, 3, 3), (1, 2, 5, 5), (3, 2, 3, 3)], {}, (), None)

#: attribute variants of the heavy ops: id -> (op, shapes, attrs, params, range, dtypes)
VARIANTS: dict[str, tuple] = {
    "depthwise": ("conv2d", [(1, 8, 10, 12), (8, 1, 3, 3)],
                  {"channels": 8, "kernel_size": (3, 3), "groups": 8, "padding": (1, 1),
                   "use_bias": False}, (1,)),
    "stride2": ("conv2d", [(2, 5, 11, 11), (24, 5, 3, 3), (24,)],
                {"channels": 24, "kernel_size": (3, 3), "strides": (2, 2)}, (1, 2)),
    "1x1-runtime-weight": ("conv2d", [(1, 4, 8, 8), (8, 4, 1, 1)],
                           {"channels": 8, "kernel_size": (1, 1), "use_bias": False}, ()),
    "dilated": ("conv2d", [(1, 4, 9, 9), (8, 4, 3, 3)],
                {"channels": 8, "kernel_size": (3, 3), "dilation": (2, 2), "use_bias": False},
                (1,)),
    "grouped": ("conv2d", [(1, 4, 6, 6), (4, 2, 3, 3)],
                {"channels": 4, "kernel_size": (3, 3), "groups": 2, "use_bias": False}, (1,)),
    "3d": ("dense", [(2, 3, 16), (20, 16)], {"units": 20, "use_bias": False}, (1,)),
    "runtime-weight": ("dense", [(5, 16), (48, 16), (48,)], {"units": 48}, ()),
    "ceil": ("avg_pool2d", [(1, 2, 7, 7)], {"pool_size": (2, 2), "strides": (2, 2),
                                            "ceil_mode": True, "count_include_pad": True}, ()),
    "1d-left": ("matmul", [(5,), (2, 5, 3)], {}, ()),
    "1d-right": ("matmul", [(2, 4, 5), (5,)], {}, ()),
    "dot": ("matmul", [(5,), (5,)], {}, ()),
    "1d": ("conv", [(2, 3, 9), (4, 3, 3)], {"pads": (2, 1), "strides": (2,)}, (1,)),
    "3d-conv": ("conv", [(1, 2, 4, 5, 4), (3, 2, 2, 3, 2)], {"pads": (1, 0, 1, 0, 1, 0)}, ()),
    "transpose-1d": ("conv_transpose", [(1, 2, 5), (2, 3, 3), (3,)],
                     {"strides": (2,), "output_padding": (1,), "use_bias": True}, (1, 2)),
    "3d-dilated": ("max_pool", [(1, 2, 5, 6, 4)], {"kernel_shape": (2, 2, 2),
                                                   "dilations": (2, 1, 1)}, ()),
    "include-pad-ceil": ("avg_pool", [(1, 3, 7, 8)],
                         {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                          "count_include_pad": True, "ceil_mode": True}, ()),
    "tanh": ("gelu", [(3, 7)], {"approximate": "tanh"}, ()),
    "flat": ("take", [(4, 5), (3,)], {"axis": None}, (), (-6, 6), {1: "int32"}),
    "sections": ("split", [(2, 6, 3)], {"indices_or_sections": 3, "axis": -2}, ()),
    "last": ("argmax", [(4, 7)], {"axis": (-1,)}, (), (-6, 6), {0: "int32"}),
    "int": ("broadcast_mod", [(2, 3), (2, 3)], {}, (), (-6, 6), {0: "int32", 1: "int32"}),
    "no-bias": ("layer_norm", [(4, 6), (6,)], {"axis": -1, "use_bias": False}, (1,)),
}


def _value(rng, shape, dtype, lo, hi):
    if dtype == "bool":
        return rng.uniform(-1, 1, shape) > 0
    if dtype.startswith(("int", "uint")):
        return rng.integers(int(lo), int(hi), shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


def _lowering_case(op, case_id, seed, shapes, attrs, params, value_range=None, dtypes=None):
    """A Case of ``shapes`` (an array is used as given: unique scatter indices, say)."""
    rng = np.random.default_rng(seed)
    lo, hi = value_range or (-2.0, 2.0)
    dtypes = dtypes or {}
    arrays = [s if isinstance(s, np.ndarray) else _value(rng, s, dtypes.get(i, "float32"), lo, hi)
              for i, s in enumerate(shapes)]
    return Case(op, case_id, dict(attrs), arrays, tuple(params))


def _lowering_cases() -> list[Case]:
    out = [_lowering_case(op, "lowering", k, *spec)
           for k, (op, spec) in enumerate(sorted(LOWERING.items()))]
    out += [_lowering_case(spec[0], vid, 1000 + k, *spec[1:])
            for k, (vid, spec) in enumerate(VARIANTS.items())]
    return out


# -- hand-written cases ---------------------------------------------------------------------------

def _floats(rng, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype("float32")


def _strings(*words):
    out = np.empty(len(words), dtype=object)
    out[:] = words
    return out


def _recurrent_cases(rng) -> list[Case]:
    """lstm/gru/rnn as ONNX exports them: time-major (seq 4, batch 2, input 3), hidden 5.
    Forward with bias and initial state (W, R, B bound as weights, so packing paths run);
    bidirectional with per-sequence lengths (a padded batch) and runtime weights; then the
    attribute variants the kernels branch on (peepholes, clip, batch-major layout, reverse,
    non-default activations with alpha/beta)."""
    seq, batch, inputs, hidden = 4, 2, 3, 5
    out = []
    for kind, gates in (("lstm", 4), ("gru", 3), ("rnn", 1)):
        for ndir in (1, 2):
            wr = [_floats(rng, ndir, gates * hidden, n, lo=-0.5, hi=0.5) for n in (inputs, hidden)]
            arrays = [_floats(rng, seq, batch, inputs), *wr,
                      _floats(rng, ndir, 2 * gates * hidden, lo=-0.5, hi=0.5)]
            attrs = {"hidden_size": hidden, "use_bias": True}
            if ndir == 1:
                attrs["use_initial_h"] = True
                states = 2 if kind == "lstm" else 1
                arrays += [_floats(rng, 1, batch, hidden, lo=-1.0, hi=1.0) for _ in range(states)]
                attrs.update({"use_initial_c": True} if kind == "lstm" else {})
                out.append(Case(kind, "forward", attrs, arrays, (1, 2, 3)))
            else:
                attrs.update(direction="bidirectional", use_sequence_lens=True)
                attrs.update({"linear_before_reset": True} if kind == "gru" else {})
                out.append(Case(kind, "bidirectional-lens", attrs,
                                arrays + [np.array([seq, 2], "int32")]))

    def w(*shape):  # one direction's weights
        return _floats(rng, 1, *shape, lo=-0.5, hi=0.5)
    h, x = 4, _floats(rng, 3, 2, inputs)
    return out + [
        Case("lstm", "peepholes-clip-batch-major",
             {"hidden_size": h, "layout": 1, "clip": 0.8, "use_bias": True,
              "use_peepholes": True, "input_forget": True},
             [_floats(rng, 2, 5, inputs), w(4 * h, inputs), w(4 * h, h), w(8 * h), w(3 * h)],
             (1, 2, 3, 4)),
        Case("gru", "reverse-activations",
             {"hidden_size": h, "direction": "reverse", "activations": ["HardSigmoid", "Softsign"],
              "activation_alpha": [0.3], "activation_beta": [0.4]},
             [x, w(3 * h, inputs), w(3 * h, h)]),
        Case("rnn", "relu-initial-state",
             {"hidden_size": h, "activations": ["Relu"], "use_initial_h": True},
             [x, w(h, inputs), w(h, h), w(2, h)], (1, 2)),
    ]


#: two regression trees over 3 features: interior nodes 0-2, leaves 0-4 (a leaf index space
#: of its own), comparisons <=, < and >=
_TREES = {"nodes_featureids": (0, 2, 1), "nodes_splits": (0.0, 0.5, -0.3),
          "nodes_modes": (0, 1, 2), "nodes_truenodeids": (1, 1, 3),
          "nodes_trueleafs": (0, 1, 1), "nodes_falsenodeids": (0, 2, 4),
          "nodes_falseleafs": (1, 1, 1), "tree_roots": (0, 2), "leaf_entries": (0, 1, 2, 3, 4),
          "leaf_targetids": (0, 0, 0, 0, 0), "leaf_weights": (0.5, -1.25, 2.0, 0.75, -0.5)}


def _ml_cases(rng) -> list[Case]:
    """ai.onnx.ml operators on a (4 rows, 3 features) batch, attributes as converters from
    scikit-learn write them."""
    x = _floats(rng, 4, 3)
    holes = x.copy()
    holes[[0, 2], [1, 0]] = np.nan
    coef = tuple(_floats(rng, 9).tolist())
    return [
        Case("imputer", "nan", {"imputed_value_floats": (0.5, -1.0, 2.0)}, [holes]),
        Case("imputer", "int", {"imputed_value_int64s": (7,), "replaced_value_int64": 0},
             [rng.integers(0, 3, (4, 3)).astype("int64")]),
        Case("feature_vectorizer", "cut-and-pad", {"num_args": 2, "inputdimensions": (2, 4)},
             [_floats(rng, 3, 3), rng.integers(-3, 3, (3, 2)).astype("int64")]),
        Case("label_encoder", "int-to-float", {"keys": [1, 2, 3], "values": [0.5, -1.5, 2.5],
                                                "default": -9.0, "value_dtype": "float32"},
             [np.array([[1, 2, 5], [3, 3, 0]], "int64")]),
        Case("one_hot_encoder", "ints", {"cats_int64s": (1, 4, 6)},
             [np.array([[1, 6], [2, 4], [4, 4]], "int64")]),
        Case("linear_regressor", "two-targets", {"coefficients": coef[:6],
                                                 "intercepts": (1.0, -1.0), "targets": 2}, [x]),
        Case("linear_classifier", "softmax", {"coefficients": coef, "intercepts": (0.1, 0.2, -0.3),
                                              "classlabels_ints": (3, 5, 7),
                                              "post_transform": "SOFTMAX"}, [x]),
        Case("svm_regressor", "rbf", {"coefficients": (0.7, -0.4, 1.1), "kernel_type": "RBF",
                                      "kernel_params": (0.5, 0.0, 3.0), "rho": (0.2,),
                                      "n_supports": 3, "support_vectors": coef}, [x]),
        Case("svm_classifier", "one-vs-one-poly",
             {"coefficients": tuple(_floats(rng, 10).tolist()), "kernel_type": "POLY",
              "kernel_params": (0.3, 1.0, 2.0), "rho": (0.1, -0.2, 0.05),
              "vectors_per_class": (2, 1, 2), "support_vectors": tuple(_floats(rng, 15).tolist()),
              "classlabels_ints": (0, 1, 2)}, [x]),
        Case("tree_ensemble", "two-trees", {**_TREES, "base_values": (0.25,)}, [x]),
        Case("tree_ensemble_classifier", "three-classes",
             {**_TREES, "leaf_targetids": (0, 1, 2, 1, 0), "classlabels_ints": (10, 20, 30),
              "post_transform": "SOFTMAX"}, [x]),
    ]


def _vision_signal_cases(rng) -> list[Case]:
    return [
        Case("col2im", "2d", {"image_shape": (4, 5), "block_shape": (2, 2)},
             [_floats(rng, 1, 2 * 4, 12)]),
        Case("col2im", "strided-padded", {"image_shape": (5, 5), "block_shape": (3, 3),
                                          "strides": (2, 2), "pads": (1, 1, 1, 1)},
             [_floats(rng, 2, 9, 9)]),
        # the indices max_pool (2x2, stride 2) would return on a (1, 2, 4, 4) input
        Case("max_unpool", "2x2", {"output_shape": (1, 2, 4, 4)},
             [_floats(rng, 1, 2, 2, 2), np.array([[[[0, 3], [9, 14]], [[17, 18], [28, 31]]]])]),
        Case("max_roi_pool", "two-rois", {"pooled_shape": (2, 2)},
             [_floats(rng, 1, 2, 6, 6), np.array([[0, 0, 0, 3, 3], [0, 1, 2, 5, 5]], "float32")]),
        Case("roi_align", "avg-half-scale", {"output_height": 2, "output_width": 3,
                                             "sampling_ratio": 2, "spatial_scale": 0.5},
             [_floats(rng, 2, 2, 6, 6), np.array([[0, 0, 6, 6], [2, 1, 9, 11]], "float32"),
              np.array([0, 1])]),
        Case("stft", "onesided", {"frame_step": 2, "frame_length": 4}, [_floats(rng, 2, 10, 1)]),
        Case("stft", "hann-full", {"frame_step": 3, "frame_length": 4, "onesided": False,
                                   "use_window": True},
             [_floats(rng, 1, 10, 1), np.hanning(4).astype("float32")]),
        Case("tensor_scatter", "kv-cache", {"axis": -2, "use_indices": True},
             [_floats(rng, 2, 3, 6, 4), _floats(rng, 2, 3, 2, 4), np.array([1, 4])]),
        Case("tensor_scatter", "circular", {"axis": 2, "mode": "circular", "use_indices": True},
             [_floats(rng, 2, 3, 5, 4), _floats(rng, 2, 3, 2, 4), np.array([4, 0])]),
        Case("resize", "linear-up", {"scales": (1.0, 1.0, 2.0, 1.5), "mode": "linear"},
             [_floats(rng, 1, 2, 3, 4)]),
        Case("resize", "cubic-down", {"sizes": (1, 2, 3, 2), "mode": "cubic"},
             [_floats(rng, 1, 2, 5, 4)]),
        Case("_resize_backward", "linear-up", {"scales": (1.0, 1.0, 2.0, 1.5), "mode": "linear"},
             [_floats(rng, 1, 2, 6, 6), _floats(rng, 1, 2, 3, 4)]),
        Case("__layout_transform__", "NCHW-NCHW4c", {"src_layout": "NCHW", "dst_layout": "NCHW4c"},
             [_floats(rng, 1, 8, 3, 3)]),
        Case("__layout_transform__", "NCHW-NHWC", {"src_layout": "NCHW", "dst_layout": "NHWC"},
             [_floats(rng, 2, 3, 4, 5)]),
        Case("_contrib_conv2d_NCHWc", "4c", {"channels": 8, "kernel_size": (3, 3),
                                             "padding": (1, 1)},
             [_floats(rng, 1, 2, 5, 5, 4), _floats(rng, 2, 2, 3, 3, 4, 4), _floats(rng, 8)],
             (1, 2)),
    ]


def _quantised_cases(rng) -> list[Case]:
    def scalar(v, dtype):
        return np.array(v, dtype)
    return [
        Case("dynamic_quantize_linear", "range", {}, [_floats(rng, 3, 4, lo=-1.5, hi=3.0)]),
        Case("qlinear_matmul", "uint8", {},
             [rng.integers(0, 255, (3, 4)).astype("uint8"), scalar(0.02, "float32"),
              scalar(120, "uint8"), rng.integers(0, 255, (4, 5)).astype("uint8"),
              scalar(0.01, "float32"), scalar(130, "uint8"), scalar(0.05, "float32"),
              scalar(128, "uint8")]),
        Case("qlinear_conv", "int8-per-channel", {"pads": (1, 1, 1, 1)},
             [rng.integers(-100, 100, (1, 2, 5, 5)).astype("int8"), scalar(0.05, "float32"),
              scalar(3, "int8"), rng.integers(-100, 100, (3, 2, 3, 3)).astype("int8"),
              np.array([0.02, 0.03, 0.01], "float32"), np.zeros(3, "int8"),
              scalar(0.5, "float32"), scalar(-5, "int8")], (3, 4, 5)),
        Case("cast_e8m0", "round-up", {},
             [np.array([0.3, 1.0, 1.5, 6.0, 1e-3, 3e38, 100.0], "float32")], needs="ml_dtypes"),
    ]


def _data_dependent_cases() -> list[Case]:
    """Ops whose output shape depends on input values (``TDynamicShape``), and strings."""
    return [
        Case("compress", "axis1", {"axis": 1},
             [np.arange(12, dtype="float32").reshape(3, 4), np.array([True, False, True, True])]),
        Case("non_zero", "2d", {}, [np.array([[0, 1.5, 0], [2.0, 0, -1.0]], "float32")]),
        Case("unique", "sorted", {}, [np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], "float32")]),
        Case("range", "float", {}, [np.array(v, "float32") for v in (1.0, 5.5, 1.5)]),
        Case("non_max_suppression", "two-classes",
             {"max_output_boxes_per_class": 2, "iou_threshold": 0.5},
             [np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3], [0, 2.05, 1, 3.05]]],
                       "float32"),
              np.array([[[0.9, 0.8, 0.7, 0.95], [0.1, 0.6, 0.5, 0.4]]], "float32")]),
        *_runtime_shape_cases(),
        Case("string_concat", "pairs", {}, [_strings("a", "bc", ""), _strings("x", "", "yz")]),
        Case("regex_full_match", "digits", {"pattern": r"\d+"},
             [_strings("123", "12a", "", "7")]),
        Case("string_normalizer", "lower-stopwords",
             {"case_change_action": "LOWER", "stopwords": ("the",)},
             [_strings("The", "Cat", "the", "Mat")]),
        Case("string_split", "whitespace", {}, [_strings("a b", "c", "d  e f")]),
    ]


def _runtime_shape_cases() -> list[Case]:
    """Shapes, K and bounds read at run time (``nnvm.ops.dynamic_shape``: detection tails)."""
    x = np.arange(24, dtype="float32").reshape(2, 3, 4) - 11.5
    i64 = lambda *v: np.array(v, "int64")  # noqa: E731
    return [
        Case("shape_of", "mid", {"start": 1, "end": 3}, [x]),
        Case("size_of", "3d", {}, [x]),
        Case("constant_of_shape", "int-fill", {"value": 7.0, "dtype": "int64"}, [i64(2, 3)]),
        Case("dynamic_reshape", "copy-infer", {}, [x, i64(0, -1)]),
        Case("dynamic_topk", "k2-smallest", {"axis": 1, "largest": False}, [x, i64(2)]),
        Case("dynamic_slice", "neg-step", {}, [x, i64(2, 0), i64(-5, 4), i64(1, 2),
                                                i64(-1, 3)]),
        Case("dynamic_split", "uneven", {"axis": 2, "num_outputs": 3}, [x]),
        Case("dynamic_expand", "bidirectional", {}, [x[:, :1, :1], i64(1, 5, 3)]),
        Case("dynamic_tile", "reps", {}, [x[0], i64(2, 1)]),
    ]


def _plugin_cases(rng) -> list[Case]:
    """Ops of the example plugins (examples/): a third-party op meets every target too."""
    logits, labels = _floats(rng, 4, 5), np.array([0, 4, 2, 2], "int32")
    return [
        Case("example_swish", "beta", {"beta": 1.5}, [_floats(rng, 3, 4, lo=-3.0, hi=3.0)],
             needs="nnvm_example"),
        Case("tf_sparse_softmax_cross_entropy", "batch", {}, [logits, labels], needs="tinyflow"),
        Case("_tf_sparse_softmax_cross_entropy_backward", "batch", {},
             [_floats(rng, 4, lo=0.5, hi=1.5), logits, labels], needs="tinyflow"),
    ]


def _op_cases() -> list[Case]:
    return (_recurrent_cases(np.random.default_rng(2000)) + _ml_cases(np.random.default_rng(2001))
            + _vision_signal_cases(np.random.default_rng(2002))
            + _quantised_cases(np.random.default_rng(2003)) + _data_dependent_cases()
            + _plugin_cases(np.random.default_rng(2004)))


def _available(case: Case) -> bool:
    return not case.needs or importlib.util.find_spec(case.needs) is not None


# -- known gaps -----------------------------------------------------------------------------------
#: case key -> {backend: why the target fails it}: each runs as a strict xfail on a graph of
#: its own (so a failing build takes no other case down) until the target is fixed, when the
#: test says so and the entry goes. Empty: every case passes on every target it was run on.
GAPS: dict[str, dict[str, str]] = {}


#: every case written; :data:`CASES` are those whose ``needs`` are importable here
ALL_CASES: list[Case] = _core_cases() + _lowering_cases() + _op_cases()
CASES: list[Case] = [c for c in ALL_CASES if _available(c)]
