"""Meta-test: every core op (elemwise, nn, reduce, transform) has a reference-kernel case, a
gradient case when it has an FGradient, and a shape-error case, unless listed below with why.
"""

import importlib.util
import pathlib

import pytest

from nnvm.op import get_op, list_op_names

HERE = pathlib.Path(__file__).parent
FAMILIES = ("elemwise", "nn", "reduce", "transform")

#: Ops with an FGradient but no finite-difference case.
GRAD_EXCEPTIONS = {
    "block_grad": "stops gradients on purpose (FD is non-zero); test_block_grad_stops_gradients",
}
#: Ops whose shape rule cannot meet a contradiction from input shapes alone.
NO_SHAPE_ERROR = {
    **{n: "one input and output = input shape: every shape is valid" for n in (
        "relu", "tanh", "sigmoid", "exp", "log", "sqrt", "negative", "abs", "sign", "copy",
        "block_grad", "zeros_like", "ones_like", "dropout", "leaky_relu", "cast", "clip",
        "__add_scalar__", "__sub_scalar__", "__rsub_scalar__", "__mul_scalar__",
        "__div_scalar__", "__rdiv_scalar__", "__pow_scalar__", "__rpow_scalar__")},
    "cast_like": "output = data shape; dtype_like's shape is irrelevant",
    "collapse_sum_like": "output = shape_like's shape; the rule (lead's) does not check that "
                         "data broadcasts from it",
    **{n: "no inputs: the shape is the attribute" for n in ("full", "zeros", "ones")},
}


def _load(family):
    path = HERE / f"test_ops_{family}.py"
    spec = importlib.util.spec_from_file_location(f"_cov_{family}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MODULES = {f: _load(f) for f in FAMILIES}


def _family(op):
    fn = op.get_attr("FReference")
    mod = getattr(fn, "__module__", "") or ""
    return mod.rsplit(".", 1)[-1] if mod.startswith("nnvm.ops.") else None


def core_ops():
    return sorted(n for n in list_op_names() if _family(get_op(n)) in FAMILIES)


def test_core_families_are_registered():
    ops = core_ops()
    for must in ("dense", "conv2d", "max_pool2d", "avg_pool2d", "global_max_pool2d",
                 "global_avg_pool2d", "softmax", "log_softmax", "flatten", "reshape", "sum",
                 "mean", "max", "min", "prod", "argmax", "argmin", "batch_norm", "dropout",
                 "concatenate", "transpose", "expand_dims", "squeeze", "cast", "broadcast_to",
                 "split", "strided_slice", "pad", "matmul", "leaky_relu", "clip", "full",
                 "zeros", "ones", "reshape_like", "take"):
        assert must in ops, must
    assert len(ops) >= 85


def _cases():
    return [c for m in MODULES.values() for c in m.CASES]


@pytest.mark.parametrize("name", core_ops())
def test_op_record_is_complete(name):
    op = get_op(name)
    assert op.has_attr("FInferShape"), f"{name}: no shape rule"
    assert op.has_attr("FReference"), f"{name}: no reference kernel"
    assert op.has_attr("TOpPattern"), f"{name}: no fusion pattern"


@pytest.mark.parametrize("name", core_ops())
def test_op_has_reference_case(name):
    assert name in {c.op for c in _cases()}, f"{name}: no forward case (shape, dtype, kernel)"


@pytest.mark.parametrize("name", core_ops())
def test_op_with_gradient_has_gradient_case(name):
    has = get_op(name).has_attr("FGradient")
    checked = name in {c.op for c in _cases() if c.grad}
    if name in GRAD_EXCEPTIONS:
        assert has and not checked, f"{name}: stale GRAD_EXCEPTIONS entry"
        return
    assert checked == has, f"{name}: FGradient={has} but gradient case={checked}"


@pytest.mark.parametrize("name", core_ops())
def test_op_has_shape_error_case(name):
    errs = {e[0] for m in MODULES.values() for e in m.ERROR_CASES if e[3]}
    if name in NO_SHAPE_ERROR:
        assert name not in errs, f"{name}: stale NO_SHAPE_ERROR entry"
        return
    assert name in errs, f"{name}: no shape-error case naming the node"
