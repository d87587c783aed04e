"""Constant tables inside a TIR kernel, stored as a string literal of 7-bit characters.

Why: TVM 0.27 has no constant buffers (``AllocateConst`` is gone), yet a large tree
ensemble needs its node table in the kernel (as code, LLVM's build time explodes past a few
thousand nodes; see ``ml_trees.MAX_NODES``). A string immediate is the one array constant
TIR still lowers: LLVM emits it as a private read-only global, and reinterpreted as a byte
pointer it can be read at any index. Python strings reach TVM as UTF-8, so only characters
0-127 are byte-exact: every value is split into 7-bit groups (least significant first) and
rebuilt with shifts when read. Reads of one record share a cache line.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import tirx
from tvm.tirx.script.builder import ir as T

BITS = 7


def groups_for(bits: int) -> int:
    return -(-bits // BITS)


def encode(columns: list[tuple[np.ndarray, int]]) -> str:
    """Records of unsigned integer ``columns`` [(values, bits)], one record per row, each
    value as ``groups_for(bits)`` characters."""
    n = len(columns[0][0])
    parts = []
    for values, bits in columns:
        v = np.asarray(values).astype(np.uint64).reshape(n)
        g = groups_for(bits)
        shifts = (np.arange(g, dtype=np.uint64) * np.uint64(BITS))
        parts.append(((v[:, None] >> shifts[None, :]) & np.uint64(127)).astype(np.uint8))
    table = np.concatenate(parts, axis=1) if parts else np.zeros((n, 0), np.uint8)
    return table.tobytes().decode("ascii")


class Table:
    """A record table in the kernel: ``field(row, name)`` reads one column as an unsigned
    integer expression (uint32, or uint64 past 32 bits)."""

    def __init__(self, columns: dict[str, tuple[np.ndarray, int]]):
        self.layout, offset = {}, 0
        for name, (_, bits) in columns.items():
            self.layout[name] = (offset, groups_for(bits), bits)
            offset += groups_for(bits)
        self.width = offset
        self.text = encode(list(columns.values()))
        self.buf = None

    def declare(self):
        """Bind the literal to a byte buffer (inside the kernel being built)."""
        ptr_type = tvm.ir.PointerType(tvm.ir.PrimType("int8"))
        handle = tvm.ir.Call(tvm.ir.Op.get("tirx.reinterpret"), [tvm.ir.StringImm(self.text)],
                             ret_ty=ptr_type)
        self.buf = T.decl_buffer((max(len(self.text), 1),), "int8", data=T.Bind(handle,
                                                                                  ptr_type))

    def field(self, row, name: str):
        offset, g, bits = self.layout[name]
        dtype = "uint64" if bits > 32 else "uint32"
        base = row * self.width + offset
        out = None
        for k in range(g):
            part = self.buf[base + k].astype(dtype)
            part = part if k == 0 else part << tirx.const(BITS * k, dtype)
            out = part if out is None else out | part
        return out


def float_bits(values, dtype: str) -> tuple[np.ndarray, int]:
    """A float column as its IEEE bits (a ``Table`` column), to read with ``as_float``."""
    if dtype == "float64":
        return np.asarray(values, np.float64).view(np.uint64), 64
    return np.asarray(values, np.float32).view(np.uint32).astype(np.uint64), 32


def as_float(bits_expr, dtype: str):
    return tirx.reinterpret(dtype, bits_expr)
