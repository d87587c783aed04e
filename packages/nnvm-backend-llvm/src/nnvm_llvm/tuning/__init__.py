"""``nnvm tune``: measure each kernel's schedule knobs on this machine, log the best.

``tune(model, trials=..., log=...)`` (``tuner.py``) searches the knobs of the llvm templates
(``compiler/schedules.py``: register tiles, K slices, vector widths, unrolling, whether to
run in parallel) for every distinct kernel of a model and appends one record per measured
setting to a JSONL log (``records.py``); ``build`` reads the logs (``tune_log=``,
``NNVM_TUNE_LOG`` or ``~/.cache/nnvm/tune/llvm.jsonl``) and schedules each kernel with its
fastest verified setting for this target and CPU. See docs/tuning.md.

Importing this package imports no TVM (``build`` reads logs through ``records``).
"""

from __future__ import annotations

from .records import cpu_model, default_log, read_log


def tune(model, target: str = "llvm", **options):
    """Tune ``model``'s kernels; see :func:`nnvm_llvm.tuning.tuner.tune`."""
    from .tuner import tune as _tune

    return _tune(model, target, **options)


__all__ = ["tune", "cpu_model", "default_log", "read_log"]
