"""Reading a model: path, bytes or ModelProto in; a checked ModelProto out, or an NNVMError.

Truncated files, random bytes, checker failures and opsets newer than the installed onnx
knows all end here as ``OnnxImportError`` with the file or node named, never as a protobuf
``DecodeError`` or a raw ``ValidationError``.
"""

from __future__ import annotations

import os
from typing import Any

from .errors import OnnxImportError, format_error


def load_model(model: Any, check: bool = True):
    """Return ``(ModelProto, base_dir)`` for a path, bytes or ModelProto."""
    import onnx

    base_dir = None
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "ONNX model bytes")
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise OnnxImportError(format_error(f"ONNX file '{path}'", "does not exist",
                                               fix="Check the path"))
        with open(path, "rb") as fh:
            data = fh.read()
        proto = _parse(data, f"ONNX file '{path}'")
        base_dir = os.path.dirname(os.path.abspath(path))
        if _has_external_data(proto):
            try:
                from onnx.external_data_helper import load_external_data_for_model

                load_external_data_for_model(proto, base_dir)
            except Exception as exc:  # noqa: BLE001
                raise OnnxImportError(format_error(f"ONNX file '{path}'", "external tensor data "
                                                   f"could not be loaded: {exc}",
                                                   fix="Keep the .data files next to the "
                                                       "model")) from None
    else:
        raise OnnxImportError(format_error("from_onnx", "model must be a path, bytes or "
                                           "onnx.ModelProto", got=type(model).__name__))
    _check_names(proto, "ONNX model")
    if check:
        check_model(proto)
    return proto, base_dir


def _check_names(proto, where: str) -> None:
    """Refuse a name that is not UTF-8. Why: protobuf hands such a string field to Python as
    ``bytes``, and every message or dict that uses the name would then fail as a raw
    TypeError (found by scripts/fuzz_onnx.py: one flipped byte in an input's name)."""
    stack = [proto.graph, *proto.functions]
    while stack:
        g = stack.pop()
        names = [g.name]
        if hasattr(g, "initializer"):  # a GraphProto (a FunctionProto names plain strings)
            names += [v.name for v in (*g.input, *g.output, *g.value_info, *g.initializer)]
        else:
            names += [*g.input, *g.output, g.domain]
        for n in g.node:
            names += [n.name, n.op_type, n.domain, *n.input, *n.output]
            for a in n.attribute:
                names.append(a.name)
                stack += ([a.g] if a.HasField("g") else []) + list(a.graphs)
        bad = next((x for x in names if not isinstance(x, str)), None)
        if bad is not None:
            raise OnnxImportError(format_error(
                where, "has a name that is not valid UTF-8", "UTF-8 names", repr(bad)[:80],
                fix="The file is corrupted, or was written by a broken exporter"))


def _parse(data: bytes, where: str):
    import onnx

    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - DecodeError, RuntimeWarning-as-error, ...
        raise OnnxImportError(format_error(where, f"is not a valid ONNX protobuf ({exc})",
                                           fix="The file is truncated or corrupted; "
                                               "re-export or re-download it")) from None
    if not proto.HasField("graph"):
        raise OnnxImportError(format_error(where, "has no graph",
                                           fix="The file is truncated, corrupted, or not an "
                                               "ONNX model"))
    return proto


def _has_external_data(proto) -> bool:
    from onnx import TensorProto

    return any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)


def check_model(proto) -> None:
    """Run the ONNX checker and the opset check, as ``OnnxImportError``."""
    import onnx

    latest = onnx.defs.onnx_opset_version()
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > latest:
            raise OnnxImportError(format_error(
                "ONNX model", "imports a default-domain opset newer than the installed onnx "
                "knows", f"<= {latest}", imp.version,
                fix="Upgrade onnx, or re-export the model at an older opset"))
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:  # noqa: BLE001 - ValidationError and C++ errors
        text = str(exc).strip().splitlines()
        raise OnnxImportError(format_error(
            "ONNX model", "fails onnx.checker", got=" ".join(text[:3])[:500],
            fix="Fix the exporter output (the message names the node), or pass check=False "
                "to import anyway")) from None
