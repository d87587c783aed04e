"""NNVM optimisation passes: folding, simplification, fusion, memory planning, placement, layout, autodiff."""

__version__ = "0.4.0"
