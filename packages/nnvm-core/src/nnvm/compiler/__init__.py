"""The compiler API of the original NNVM: ``build``, ``build_config``, param dicts, graph_util."""

from __future__ import annotations

from ..serialization.param_dict import load_param_dict, save_param_dict
from . import graph_util
from .build_module import build, build_config, optimize

__all__ = ["build", "build_config", "optimize", "save_param_dict", "load_param_dict",
           "graph_util"]
