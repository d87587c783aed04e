"""The opt-level pipelines: which passes ``nnvm.compiler.build`` runs, in which order.

``default`` lists every pass once in processing order; ``opt_level_passes(level)`` keeps the
passes whose ``opt_level`` is at most ``level`` (NNVM's ``OPT_PASS_LEVEL``: SimplifyInference
0, FuseOps 1, PrecomputePrune 2, FoldScaleAxis and AlterOpLayout 3), and
``build_config(add_pass=[...], disabled_pass=[...])`` switches single passes by name.
PrecomputePrune appears twice: first to fold SimplifyInference's scale/shift arithmetic into
constants FoldScaleAxis can recognise, then to fold the scaled and re-laid-out weights.
"""

from __future__ import annotations

DEFAULT = [
    "OrderMutation", "SimplifyInference", "InferShape", "InferType",
    "PrecomputePrune", "EliminateCommonSubexpr", "SimplifyAlgebra", "EliminateDeadCode",
    "FoldScaleAxis", "AlterOpLayout", "CorrectLayout", "PrecomputePrune",
    "InferShape", "InferType", "FuseOps", "PlanMemory",
]


def register(registry) -> None:
    """Register ``default`` (replacing core's plevel-0 one) and ``O0``..``O3``."""
    from nnvm.pass_manager import _PASSES

    default = [n for n in DEFAULT if n in _PASSES]  # PlanMemory may live in another module
    registry.register_pipeline("default", default, plevel=10)
    for level in range(4):
        registry.register_pipeline(f"O{level}", [
            n for n in default if n in ("InferShape", "InferType") or
            (_PASSES[n].opt_level is not None and _PASSES[n].opt_level <= level)], plevel=10)
