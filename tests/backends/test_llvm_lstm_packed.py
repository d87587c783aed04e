"""Recurrent weights packed at load into column panels (``runtime.packing``'s
``recurrent_panels``, ``recurrent_loop.gemm_packed``) give the NumPy reference's results.

Why: the 512-unit bidirectional LSTM of the OCR model streamed its 4 MB recurrent matrix
per step as 16 rows 2 KB apart and its input weights once per 4 input rows; packed at load
each block is one contiguous run, read once (issue 14: 3.5 -> 2.7 ms at 1 thread). Every
path that reads a packed weight is built here: the input projection (rows a multiple of
6, 5, 3 and 1 per register tile, ``k`` not a whole vector), the step product on one thread
per direction, split across threads (GRU with its reset before ``R``: two products a step,
the second starting at a block boundary), next to fused step units reading ``R`` as stored
(only ``W`` packed), with ``layout`` 1, ``sequence_lens``, peepholes, and a weight rebound
after the build (repacked by the executor), and the input projection computed in chunks
inside the steps (``overlapped_step``: chunks of 5, 4, 3 and 2 rows, ``k`` shorter and
longer than the state, ``W`` blocks beyond a step's ``R`` blocks). Each case checks the
plan packs exactly the weights ``packed_weights`` names, and which chunk the steps took
(a spy on ``overlapped_step`` during a build with the caches off), so a case that
silently fell back would fail.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import sym

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
pytest.importorskip("nnvm_llvm", reason="llvm backend not installed")
pytest.importorskip("tvm", reason="the llvm compiler needs TVM (apache-tvm)")

from nnvm_llvm.compiler import cache, recurrent_loop  # noqa: E402
from nnvm_llvm.runtime import packing  # noqa: E402

GATES = {"lstm": 4, "gru": 3, "rnn": 1}

#: kind, seq, batch, n_in, hid, attrs, the slots packed
CASES = {
    # the OCR model's layer: W (20 rows: 5 a tile) and R packed, a direction a thread
    "lstm-bidir-512": ("lstm", 20, 1, 512, 512, {"direction": "bidirectional"}, {"W", "R"}),
    # 7 rows (no 2 to 6 divides them): W in 8-vector blocks, one row a register tile
    "lstm-bidir-512-7rows": ("lstm", 7, 1, 512, 512, {"direction": "bidirectional"},
                             {"W", "R"}),
    # one direction: the steps are fused step units on R as stored, only W packed
    "lstm-forward-512-peep": ("lstm", 4, 2, 512, 512, {"use_peepholes": True,
                                                       "use_initial_c": True}, {"W"}),
    # GRU, reset before R: its steps split across threads, R packed (two products a step)
    "gru-forward-512": ("gru", 6, 2, 64, 512, {}, {"R"}),
    # 64-row blocks (320 units), k = 300 not a whole vector, 21 rows (3 a tile), layout 1
    "gru-bidir-320-lbr-lens-layout1": ("gru", 7, 3, 300, 320, {
        "direction": "bidirectional", "linear_before_reset": True, "layout": 1,
        "use_sequence_lens": True}, {"W", "R"}),
    # one gate: 5 rows (5 a tile); one direction would fuse its steps (R as stored)
    "rnn-bidir-512": ("rnn", 5, 1, 512, 512, {"direction": "bidirectional"}, {"W", "R"}),
    # the projection inside the steps (``overlapped_step``), 4-row chunks: k = 300 shorter
    # than the state (a tail of R alone), layout 1, sequence_lens, GRU after-reset
    "gru-bidir-512-overlap-lbr-lens-layout1": ("gru", 8, 1, 300, 512, {
        "direction": "bidirectional", "linear_before_reset": True, "layout": 1,
        "use_sequence_lens": True}, {"W", "R"}),
    # 3-row chunks, k = 640 longer than the state (a tail of W alone)
    "rnn-bidir-512-overlap-k640": ("rnn", 6, 1, 640, 512, {"direction": "bidirectional"},
                                   {"W", "R"}),
    # 2-row chunks, peepholes and initial c
    "lstm-bidir-512-overlap-peep": ("lstm", 4, 1, 512, 512, {
        "direction": "bidirectional", "use_peepholes": True, "use_initial_c": True},
        {"W", "R"}),
}

#: the cases whose projection runs inside the steps, by their chunk of rows
OVERLAP_CHUNKS = {"lstm-bidir-512": 5, "gru-bidir-512-overlap-lbr-lens-layout1": 4,
                  "rnn-bidir-512-overlap-k640": 3, "lstm-bidir-512-overlap-peep": 2}


def _inputs(rng, kind, seq, batch, n_in, hid, attrs):
    """Slot names, values and dtypes, weights scaled like a trained layer's (the gates not
    all saturated, so a wrong product shows)."""
    g, d = GATES[kind], 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    state = (d, batch, hid) if layout == 0 else (batch, d, hid)
    scale = 1 / np.sqrt(hid)
    slots = [("X", (seq, batch, n_in) if layout == 0 else (batch, seq, n_in), 1.0),
             ("W", (d, g * hid, n_in), scale), ("R", (d, g * hid, hid), scale),
             ("B", (d, 2 * g * hid), scale)]
    if attrs.get("use_sequence_lens"):
        slots.append(("L", (batch,), 0))
    slots.append(("H0", state, 1.0))
    if attrs.get("use_initial_c"):
        slots.append(("C0", state, 1.0))
    if attrs.get("use_peepholes"):
        slots.append(("P", (d, 3 * hid), scale))
    values = {n: rng.uniform(-s, s, shape).astype("float32") for n, shape, s in slots}
    dtypes = {n: "float32" for n in values}
    if "L" in values:
        values["L"] = np.array([seq - 2] + [seq] * (batch - 1), "int32")
        dtypes["L"] = "int32"
    return [n for n, _, _ in slots], values, dtypes


def _build(kind, seq, batch, n_in, hid, attrs, rng):
    names, values, dtypes = _inputs(rng, kind, seq, batch, n_in, hid, attrs)
    attrs = dict(attrs, use_bias=True, use_initial_h=True)
    params = {n: values[n] for n in ("W", "R", "B", "P") if n in values}
    y = getattr(sym, kind)(*[sym.Variable(n) for n in names], hidden_size=hid, **attrs)
    shape = {n: v.shape for n, v in values.items()}
    lib = nnvm.compiler.build(y, target="llvm", shape=shape, params=params, dtype=dtypes)
    ref = nnvm.compiler.build(y, target="reference", shape=shape, params=params, dtype=dtypes)
    feed = {n: v for n, v in values.items() if n in lib.input_names}
    return lib, ref, feed, attrs


def _check(lib, ref, feed, threads):
    lib.set_num_threads(threads)
    want = ref.run(**feed)
    for run in range(2):  # a run starts from the same buffers: no state carried over
        got = lib.run(**feed)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5,
                                       err_msg=f"{threads} threads, run {run}")


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request):
    kind, seq, batch, n_in, hid, attrs, slots = CASES[request.param]
    chunks = []
    real = recurrent_loop._Kernel.overlapped_step

    def spy(self, d, s, t_of, r, *args):
        chunks.append(r)
        return real(self, d, s, t_of, r, *args)
    # a fresh build (no kernel from the caches), noting the chunk of each overlapped step
    cache.clear_memory()
    mp = pytest.MonkeyPatch()
    mp.setenv("NNVM_CACHE_DIR", "off")
    mp.setattr(recurrent_loop._Kernel, "overlapped_step", spy)
    try:
        lib, ref, feed, attrs = _build(kind, seq, batch, n_in, hid, attrs,
                                       np.random.default_rng(11))
    finally:
        mp.undo()
    assert set(chunks) == ({OVERLAP_CHUNKS[request.param]} if request.param in OVERLAP_CHUNKS
                           else set()), (request.param, chunks)
    return lib, ref, feed, kind, seq, batch, n_in, hid, attrs, slots


@pytest.mark.parametrize("threads", [1, 2])
def test_packed_recurrent_weights_match_reference(built, threads):
    lib, ref, feed, kind, seq, batch, n_in, hid, attrs, slots = built
    # the path is taken: exactly the expected weights are packed, in the panel layout
    packed = {p["param"]: (p["layout"], p["block"]) for p in lib._plan["packed"].values()}
    assert set(packed) == slots, packed
    layout = attrs.get("layout", 0)
    x = (seq, batch, n_in) if layout == 0 else (batch, seq, n_in)
    want = recurrent_loop.packed_weights(kind, dict(attrs, hidden_size=hid),
                                         [x, None, (1, GATES[kind] * hid, hid)],
                                         16)
    assert {("W", "R")[i - 1]: spec for i, spec in want.items()} == packed
    for lay, block in packed.values():
        assert lay == "recurrent_panels" and hid % block == 0 and block % 16 == 0
    _check(lib, ref, feed, threads)


def test_rebound_recurrent_weight_is_repacked():
    """A new ``R`` set after the build is packed again by the executor (the kernel reads
    only the packed copy): the results follow the new weight."""
    rng = np.random.default_rng(5)
    kind, seq, batch, n_in, hid, attrs, _ = CASES["rnn-bidir-512"]
    lib, ref, feed, attrs = _build(kind, seq, batch, n_in, hid, attrs, rng)
    before = lib.run(**feed)[0].copy()
    r = rng.uniform(-1, 1, lib.params["R"].shape).astype("float32") / np.sqrt(hid)
    lib.params["R"] = r
    ref.params["R"] = r
    got = lib.run(**feed)
    assert not np.allclose(got[0], before)
    for g, w in zip(got, ref.run(**feed)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


def test_small_layers_keep_the_weights_as_stored():
    """The 128-unit layers (their matrices fit L2) and sizes of part vectors pack
    nothing: their kernels are the dot tiles measured before."""
    lstm = {"hidden_size": 128}
    assert recurrent_loop.packed_weights("lstm", lstm, [(8, 1, 128), None, (1, 512, 128)],
                                         16) == {}
    odd = {"hidden_size": 500, "direction": "bidirectional"}
    assert recurrent_loop.packed_weights("lstm", odd, [(20, 1, 512), None, (2, 2000, 500)],
                                         16) == {}


def test_input_block_follows_the_rows():
    """The projection's register tile: 4-vector blocks for rows 2 to 6 divide (20 rows of
    2 batch entries: 5 x 4 accumulators), 8-vector blocks otherwise (7 rows: 1 x 8), ``R``
    8 vectors; one batch entry whose steps a chunk of 2 to 5 divides takes the projection
    inside the steps (``overlapped_step``) on 2-vector blocks, unless switched off."""
    attrs = {"hidden_size": 512, "direction": "bidirectional"}
    for seq, batch, block in ((10, 2, 64), (7, 1, 128), (20, 1, 32), (8, 1, 32)):
        assert recurrent_loop.packed_weights("lstm", attrs, [(seq, batch, 512), None,
                                                             (2, 2048, 512)], 16) == {
            1: ("recurrent_panels", block), 2: ("recurrent_panels", 128)}, (seq, batch)
    mp = pytest.MonkeyPatch()
    mp.setattr(recurrent_loop, "OVERLAP", False)
    try:
        assert recurrent_loop.packed_weights("lstm", attrs, [(20, 1, 512), None,
                                                             (2, 2048, 512)], 16)[1] == (
            "recurrent_panels", 64)
    finally:
        mp.undo()


def test_recurrent_panels_layout():
    """``(D, N, K) -> (D, ceil(N / bn), K, bn)``, zero-padded, each direction ``dense``'s
    panels; ``packed_shape`` agrees."""
    w = np.arange(2 * 40 * 3, dtype="float32").reshape(2, 40, 3)
    got = packing.pack("recurrent_panels", w, 16)
    assert got.shape == packing.packed_shape("recurrent_panels", w.shape, 16) == (2, 3, 3, 16)
    assert got.flags.c_contiguous
    for d in range(2):
        for n in range(48):
            for k in range(3):
                assert got[d, n // 16, k, n % 16] == (w[d, n, k] if n < 40 else 0)
