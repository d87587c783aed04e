"""Test helpers for op authors and plugin writers (``nnvm.testing``).

``check_computation`` runs one op (or a symbol) through shape and type inference and the
reference interpreter, and checks an op's FGradient against central finite differences, so a
plugin's new op can be validated with two calls. Model builders for tests live in
``nnvm.testing.models`` when installed.
"""

from __future__ import annotations

from .check_computation import (OpCase, build_op_graph, check_case_forward,
                                check_case_gradient, check_function, check_gradient,
                                check_shape_error, infer_graph, numeric_gradient)

__all__ = ["OpCase", "build_op_graph", "check_case_forward", "check_case_gradient",
           "check_function", "check_gradient", "check_shape_error", "infer_graph",
           "numeric_gradient"]
