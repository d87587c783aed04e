"""Test helpers: lower the op conformance cases and model families with a renderer, batch
their kernels into one program (one compiler call per arch), compare dialects.

Pure text: no compiler or GPU is needed. The conformance cases live in the repository's
``tests/core/test_ops_*.py`` (``CASES`` lists of ``nnvm.testing.check_computation.OpCase``);
:func:`op_cases` loads them from a given directory.
"""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np

import nnvm
from nnvm_codegen_c.lower import lower_graph
from nnvm.testing.check_computation import _head_graph, _names_for, infer_graph
from nnvm.testing.models import MODELS

CASE_MODULES = ("test_ops_elemwise", "test_ops_nn", "test_ops_reduce", "test_ops_transform")


def op_cases(core_dir: str) -> list:
    """Every OpCase of the op conformance tests in ``core_dir`` (tests/core)."""
    cases = []
    for mod in CASE_MODULES:
        path = os.path.join(core_dir, f"{mod}.py")
        if not os.path.exists(path):
            continue
        spec = importlib.util.spec_from_file_location(f"_cuda_cases_{mod}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cases += list(getattr(module, "CASES", []))
    return cases


def case_graph(case, float_dtype: str = "float32"):
    """``(inferred graph, feed)`` of one OpCase in ``float_dtype``."""
    arrays = case.arrays(float_dtype)
    graph, node = _head_graph(case.op, case.attrs, _names_for(case.op, case.attrs, arrays))
    feed = {e.node.name: a for e, a in zip(node.inputs, arrays)}
    g = infer_graph(graph, {k: v.shape for k, v in feed.items()},
                    {k: v.dtype.name for k, v in feed.items()})
    return g, feed


def model_graph(name: str):
    """``(optimised graph, params, shapes)`` of a model family at opt level 2."""
    net, params, shapes = MODELS[name]()
    g, params = nnvm.compiler.optimize(net, shape=shapes, params=params)
    return g, params, shapes


def lowered_cases(cases, renderer, limits: dict, float_dtypes=("float32", "float64")):
    """``[(label, graph, steps)]`` for every conformance case in each float dtype."""
    out = []
    for i, case in enumerate(cases):
        for dt in float_dtypes:
            g, _ = case_graph(case, dt)
            out.append((f"c{i}_{dt}_{case.id}", g, lower_graph(g, renderer, limits)))
    return out


def batch_program(renderer, labelled_steps) -> tuple[str, list[str]]:
    """One program of all kernels of ``[(label, graph, steps)]``, each renamed
    ``<label-prefix>_<name>`` to stay unique."""
    parts, names = [], []
    for label, _, steps in labelled_steps:
        prefix = re.sub(r"[^0-9a-zA-Z_]", "_", label.split("_", 2)[0] + "_" +
                        label.split("_", 2)[1])
        for s in steps:
            for k in s.kernels:
                new = f"{prefix}_{k.name}"
                parts.append(k.source.replace(f" {k.name}(", f" {new}(", 1))
                names.append(new)
    return renderer.preamble + "\n".join(parts), names


def random_feed(graph, params, rng=None) -> dict:
    rng = rng or np.random.default_rng(0)
    idx = graph.index
    shapes, dtypes = graph.attrs["shape"], graph.attrs["dtype"]
    feed = {}
    for nid in idx.input_nodes:
        name = idx.nodes[nid].name
        if name in params:
            continue
        e = idx.entry_rptr[nid]
        feed[name] = rng.standard_normal(shapes[e]).astype(dtypes[e])
    return feed


def neutralize(source: str, renderer, local_size=None) -> str:
    """A kernel's text with every dialect token replaced by a neutral placeholder.

    Two dialects' kernels for the same fused group must then be identical: the body (index
    arithmetic, loops, fused expressions, constants) comes from the shared builder; only the
    tokens the renderer's hooks spell differ.
    """
    text = source
    attrs = renderer.kernel_attrs(local_size)
    if attrs:
        text = text.replace(attrs, "")
    for kind in ("global", "local", "group"):  # global first: CUDA's contains threadIdx
        for d in range(3):
            text = text.replace(renderer.index(kind, d), f"@{kind}{d}")
    text = text.replace(renderer.kernel_prefix, "@kernel")
    if renderer.barrier:
        text = text.replace(renderer.barrier, "@barrier;")
    text = text.replace(renderer.smem_prefix, "@smem ")
    if renderer.buffer_prefix:
        text = text.replace(renderer.buffer_prefix, "")
    text = re.sub(rf"\b{re.escape(renderer.restrict)}\b", "@restrict", text)
    # a dialect may spell a function per argument type (OpenCL's inlined float32 exp...)
    names = set(renderer.math_names) | {"exp", "log", "tanh", "erf", "pow"}
    spelled = {(renderer.func(n, dt), n) for n in names for dt in [None, *renderer.type_map]}
    for c_name, name in sorted(spelled, key=lambda cn: -len(cn[0])):
        text = re.sub(rf"\b{re.escape(c_name)}\(", f"@fn_{name}(", text)
    canon = {"bool": "uint8"}
    ctypes = sorted(renderer.type_map.items(), key=lambda kv: -len(kv[1]))
    for dtype, ctype in ctypes:
        text = re.sub(rf"(?<![\w@]){re.escape(ctype)}(?![\w])",
                      f"@T_{canon.get(dtype, dtype)}", text)
    return re.sub(r"[ \t]+", " ", text).strip()
