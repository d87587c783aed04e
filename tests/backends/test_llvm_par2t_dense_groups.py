"""A linear layer whose packed weight spans several ``schedules.DENSE_GROUP_BYTES`` groups
(GPT-2's LM head: 128 x 50257, 25.7 MB) lets its row tiles take turns over one group of
panels at a time (``schedules._panel_group``), each parallel task one (group, row tile):
checked here against numpy at 1 and 2 threads on sizes where the last group is partial,
the output width is sliced from padded panels and the row tiles do not divide the rows.

Why: with each panel outermost, the output went out in 128-byte pieces to every row, and
the LM head ran at 1.5x its compute roof on one thread (speed is measured by
``benchmarks/bench_roofline.py``, not asserted here).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import nnvm.symbol as sym
from llvm_probe import run_weighted, skip_without_llvm

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

skip_without_llvm()

#: output units: 2112 padded (66 panels of 32 at AVX-512, 263 of 8 at AVX2), over two
#: groups at K = 128 and not a whole number of them
UNITS = 2100


def _layer(bias: bool, rng):
    y = sym.dense(sym.Variable("x"), units=UNITS, use_bias=bias, name="fc")
    params = {"fc_weight": (rng.standard_normal((UNITS, 128)) * 0.1).astype("float32")}
    if bias:
        params["fc_bias"] = rng.standard_normal(UNITS).astype("float32")
    return y, params


def test_grouped_panels_are_the_parallel_tasks():
    from nnvm_llvm.compiler.codegen import kernel_lowerings
    from nnvm_llvm.compiler.schedules import schedule
    from nnvm_llvm.tuning.tuner import _prepare

    y, params = _layer(False, np.random.default_rng(0))
    graph, params = _prepare(y, {"x": (32, 128)}, "float32", params, 3)
    (gl,) = [gl for gl in kernel_lowerings(graph, params, 16) if gl.kind == "dense"]
    info = gl.schedule_info(16)
    text = str(schedule(gl.primfunc(16), info))
    assert info.applied
    # 66 panels of 32 in groups of 32 (16 KB panels, 512 KB groups): 3 groups x 4 row tiles
    assert [int(n) for n in re.findall(r"in T\.parallel\((\d+)\)", text)] == [3 * 4], text


@pytest.mark.parametrize("rows", [37, 20, 32])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_panels_match_numpy(rows, bias, threads, rng):
    y, params = _layer(bias, rng)
    x = rng.standard_normal((rows, 128)).astype("float32")
    _, got = run_weighted(y, x, params, threads)
    want = x @ params["fc_weight"].T + (params["fc_bias"] if bias else 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
