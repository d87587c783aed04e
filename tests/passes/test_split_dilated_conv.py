"""SplitDilatedConv: region bands, when it fires, and that the split graph computes the same."""

import pytest

from _numerics import assert_same_numerics, op_names, setup
from nnvm import sym
from nnvm_passes.split_dilated_conv import bands

X = sym.Variable


def _conv(k=3, d=12, s=1, pad=None, bias=True, c=8, oc=4):
    pad = d * (k // 2) if pad is None else pad
    args = [X("x"), X("w")] + ([X("b")] if bias else [])
    return sym.relu(sym.conv2d(*args, channels=oc, kernel_size=(k, k), strides=(s, s),
                               padding=(pad, pad), dilation=(d, d), use_bias=bias))


def test_bands_of_deeplab_aspp():
    # 3x3, dilation 12, padding 12 on 16: rows 0-3 read taps 1-2, 4-11 tap 1, 12-15 taps 0-1
    assert bands(3, 1, 12, 12, 16, 16) == [(0, 4, 1, 3), (4, 12, 1, 2), (12, 16, 0, 2)]
    # dilation 24: only the centre tap ever reads the input
    assert bands(3, 1, 24, 24, 16, 16) == [(0, 16, 1, 2)]
    # an undilated 3x3 conv: every output reads a run of taps
    assert bands(3, 1, 1, 1, 5, 5) == [(0, 1, 1, 3), (1, 4, 0, 3), (4, 5, 0, 2)]


@pytest.mark.parametrize("net,shape", [
    (lambda: _conv(), (1, 8, 16, 16)),                         # DeepLabV3's ASPP rate 12
    (lambda: _conv(d=24), (1, 8, 16, 16)),                     # rate 24: a 1x1 conv is left
    (lambda: _conv(d=5, s=2, bias=False), (2, 8, 13, 11)),     # stride 2, batch 2, odd sizes
    (lambda: _conv(k=5, d=4, pad=3), (1, 8, 12, 12)),          # asymmetric live ranges
])
def test_split_matches_the_whole_conv(net, shape):
    g, _, feed = setup(net(), {"x": shape})
    after = g.apply("SplitDilatedConv")
    assert "concatenate" in op_names(after) or op_names(after).count("conv2d") == 1
    assert "conv2d" in op_names(after)
    assert_same_numerics(g, after, feed, rtol=1e-4)


@pytest.mark.parametrize("net,shape", [
    (lambda: _conv(d=1), (1, 8, 16, 16)),                      # not dilated
    (lambda: _conv(d=2), (1, 8, 32, 32)),                      # taps live almost everywhere
    (lambda: sym.conv2d(X("x"), X("w"), channels=8, kernel_size=(3, 3), padding=(12, 12),
                        dilation=(12, 12), groups=8, use_bias=False), (1, 8, 16, 16)),
])
def test_kept_where_it_does_not_pay(net, shape):
    g, _, feed = setup(net(), {"x": shape})
    after = g.apply("SplitDilatedConv")
    assert op_names(after) == op_names(g)
