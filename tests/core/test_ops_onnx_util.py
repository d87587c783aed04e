"""Shared helpers for the ONNX-semantics op tests: ONNX node test cases as oracle data.

The ONNX package builds its backend node tests in Python (``onnx.backend.test.case.node``):
importing one case module runs its ``export_*`` functions, each recording a one-node model and
the expected outputs computed by ONNX's own reference. We run our NumPy kernels (and shape and
dtype rules) on those inputs and compare. Adapters translate an ONNX node into our op call the
way the importer does (constant shape-like inputs folded into attributes).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Callable

import numpy as np
import pytest

from nnvm.op import get_op

_CACHE: dict[str, list] = {}


def onnx_cases(module: str) -> list:
    """The ONNX test cases defined by ``onnx.backend.test.case.node.<module>`` (no expanded)."""
    if module not in _CACHE:
        node_pkg = importlib.import_module("onnx.backend.test.case.node")
        start = len(node_pkg._NodeTestCases)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
        _CACHE[module] = [c for c in node_pkg._NodeTestCases[start:]
                          if "_expanded" not in c.name]
    return _CACHE[module]


def node_attrs(node) -> dict:
    import onnx

    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def to_array(x):
    import onnx

    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return np.asarray(x)


def case_params(table: dict[str, tuple[str, Callable]]) -> list:
    """pytest params ``(case, adapter)`` for every case of every module in ``table``."""
    out = []
    for module, (op_type, adapter) in table.items():
        for c in onnx_cases(module):
            if c.model.graph.node[0].op_type != op_type or len(c.model.graph.node) != 1:
                continue
            out.append(pytest.param(c, adapter, id=c.name))
    return out


def run_case(case, adapter, check_rules: bool = True) -> None:
    """Check an op's kernel, shape rule and dtype rule against one ONNX node test case.

    ``adapter(attrs, inputs) -> (op_name, attrs, arrays)``; ``inputs`` holds None for absent
    optional ONNX inputs. Returns nothing; asserts.
    """
    node = case.model.graph.node[0]
    for inputs, expected in case.data_sets:
        named = dict(zip([n for n in node.input if n], [to_array(x) for x in inputs]))
        ins = [named.get(n) if n else None for n in node.input]
        name, attrs, arrays = adapter(node_attrs(node), ins)
        o = get_op(name)
        attrs = o.parse_attrs(attrs)
        res = o.get_attr("FReference")(attrs, *arrays)
        res = res if isinstance(res, tuple) else (res,)
        expected = [to_array(e) for e in expected]
        outs_present = [i for i, n in enumerate(node.output) if n]
        assert len(res) >= len(expected)
        for k, exp in zip(outs_present, expected):
            got = np.asarray(res[k])
            assert got.shape == exp.shape, (k, got.shape, exp.shape)
            if exp.dtype.kind in "fc" or str(exp.dtype).startswith(("float8", "bfloat")):
                np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64),
                                           rtol=max(case.rtol, 1e-4), atol=max(case.atol, 1e-5))
            else:
                np.testing.assert_array_equal(got, exp)
            assert got.dtype == exp.dtype, (k, got.dtype, exp.dtype)
        if not check_rules:
            continue
        nout = o.num_outputs(attrs)
        in_shapes = [tuple(a.shape) for a in arrays]
        _, shapes = o.get_attr("FInferShape")(attrs, list(in_shapes), [None] * nout)
        dyn = o.get_attr("TDynamicShape", False)
        for k, exp in zip(outs_present, expected):
            if dyn:
                assert shapes[k] is None
            else:
                assert tuple(shapes[k]) == exp.shape, (k, shapes[k], exp.shape)
        rule = o.get_attr("FInferType")
        if rule is not None:
            _, dtypes = rule(attrs, [a.dtype.name for a in arrays], [None] * nout)
            for k, exp in zip(outs_present, expected):
                assert dtypes[k] == exp.dtype.name, (k, dtypes[k], exp.dtype.name)


def const(x) -> list:
    """A folded ONNX constant input as a Python list (for attributes)."""
    return np.asarray(x).reshape(-1).tolist()
