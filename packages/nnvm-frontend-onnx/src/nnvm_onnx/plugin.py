"""Entry point of the NNVM ONNX frontend (group ``nnvm``, name ``onnx``).

Imports without onnx installed: the frontend then reports why it is unavailable.
"""

from __future__ import annotations

from nnvm import hookimpl


@hookimpl
def nnvm_frontends() -> list:
    from .frontend import OnnxFrontend

    return [OnnxFrontend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "ONNX frontend (nnvm.frontend.from_onnx) and onnx.backend adapter"}


@hookimpl
def nnvm_add_cli_commands(subparsers) -> None:
    """``nnvm export-onnx``: an optimised graph as ONNX, for Netron (onnx is imported only
    when the command runs)."""
    import argparse

    p = subparsers.add_parser(
        "export-onnx", help="write the optimised graph as ONNX (open it in Netron)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The graph a build runs, after folding and fusion, as an ONNX model: "
                    "fused kernels as ONNX functions (domain ai.nnvm.fused), ops without an "
                    "ONNX equivalent as nodes of domain ai.nnvm with their attributes.",
        epilog="examples:\n  nnvm export-onnx model.nnvm -o model.optimized.onnx\n"
               "  nnvm export-onnx model.onnx --shape x=1,3,224,224 --opt-level 3 -o opt.onnx")
    p.add_argument("model", help="a .nnvm artifact, an .onnx model or an NNVM graph .json")
    p.add_argument("-o", "--output", metavar="OUT.onnx",
                   help="output path (default: MODEL.optimized.onnx here)")
    p.add_argument("--shape", action="append", metavar="NAME=D1,D2,...",
                   help="input shape for .onnx/.json, repeatable")
    p.add_argument("--dtype", action="append", metavar="[NAME=]DTYPE", help="input dtype")
    p.add_argument("--params", help="param-dict file for a graph .json")
    p.add_argument("--opt-level", type=int, default=2, choices=range(4), metavar="{0..3}",
                   help="optimisation level for .onnx/.json (default 2)")
    p.set_defaults(func=_cmd_export_onnx)


def _cmd_export_onnx(args) -> int:
    from .exporter import cmd_export_onnx

    return cmd_export_onnx(args)
