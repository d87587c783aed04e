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
    "FoldScaleAxis", "SplitDilatedConv", "AlterOpLayout", "CorrectLayout", "PrecomputePrune",
    "InferShape", "InferType", "FuseOps", "PlanMemory",
]


def pipelines(passes) -> list:
    """``default`` (replacing core's plevel-0 one) and ``O0``..``O3``, over the ``PassDef``
    records ``passes`` this package found."""
    from nnvm.pass_manager import PipelineDef

    found = {p.name: p for p in passes}
    core = ("InferShape", "InferType")  # core's analyses, registered before any plugin
    default = [n for n in DEFAULT if n in found or n in core]  # PlanMemory may live elsewhere
    out = [PipelineDef("default", tuple(default), plevel=10)]
    for level in range(4):
        out.append(PipelineDef(f"O{level}", tuple(
            n for n in default if n in core or
            (found[n].opt_level is not None and found[n].opt_level <= level)), plevel=10))
    return out
