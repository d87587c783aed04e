"""ONNX-semantics recurrent layers (lstm, gru, rnn) against ONNX node test data."""

from __future__ import annotations

import pytest

from test_ops_onnx_util import case_params, run_case

_FLAGS = {3: "use_bias", 4: "use_sequence_lens", 5: "use_initial_h", 6: "use_initial_c",
          7: "use_peepholes"}


def _recurrent(name):
    def adapt(attrs, ins):
        a = dict(attrs)
        for i, flag in _FLAGS.items():
            if name != "lstm" and i > 5:
                continue
            a[flag] = len(ins) > i and ins[i] is not None
        if "activations" in a:
            a["activations"] = [s.decode() if isinstance(s, bytes) else s
                                for s in a["activations"]]
        return name, a, [x for x in ins if x is not None]
    return adapt


SEQUENCE = {"lstm": ("LSTM", _recurrent("lstm")), "gru": ("GRU", _recurrent("gru")),
            "rnn": ("RNN", _recurrent("rnn"))}


@pytest.mark.parametrize("case, adapter", case_params(SEQUENCE))
def test_recurrent_matches_onnx(case, adapter):
    run_case(case, adapter)
