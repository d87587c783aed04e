"""KernelBuilder: emits one kernel's body as statements, one value per (entry, coordinates).

A fused group is lowered by asking for the value of its root's output at symbolic output
coordinates (C index expressions). Each op's *value rule* (``nnvm_codegen_c.rules``) turns
"value of my output at these coordinates" into expressions over its inputs' values at derived
coordinates; an entry produced outside the group is loaded from a kernel parameter. Values are
memoised per scope, so a diamond inside a group is computed once, and a loop body (a reduction,
a GEMM tile load) gets its own scope that sees, but does not leak into, the enclosing one.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

from nnvm.errors import UnsupportedOpError, format_error, node_where

from .renderer import CLikeRenderer, Kernel, TensorArg


class GraphInfo:
    """Shapes, dtypes and producer lookup of an indexed graph (shared by every kernel)."""

    def __init__(self, graph):
        self.graph = graph
        self.idx = idx = graph.index
        self.shapes = [tuple(s) if s is not None else None for s in graph.attrs["shape"]]
        self.dtypes = list(graph.attrs["dtype"])
        self.entry_node: list[int] = []
        for nid in range(idx.num_nodes):
            self.entry_node += [nid] * (idx.entry_rptr[nid + 1] - idx.entry_rptr[nid])

    def entry(self, nid: int, k: int = 0) -> int:
        return self.idx.entry_rptr[nid] + k

    def inputs(self, nid: int) -> list[int]:
        rptr = self.idx.entry_rptr
        return [rptr[i] + k for i, k, _ in self.idx.inputs[nid]]

    def num_outputs(self, nid: int) -> int:
        return self.idx.entry_rptr[nid + 1] - self.idx.entry_rptr[nid]


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class KernelBuilder:
    """Builds one kernel of a fused group.

    Args:
        renderer: the dialect.
        info: the graph's GraphInfo.
        members: node ids of the group (their outputs are computed, not loaded).
        root: the group's root node id (whose outputs the kernel stores).
        master: the node whose template drives the loops (== root for plain groups).
        name: the kernel name.
        limits: device limits (``max_work_group_size``, ``local_mem_size``) for templates.
    """

    def __init__(self, renderer: CLikeRenderer, info: GraphInfo, members: set[int], root: int,
                 master: int, name: str, limits: dict | None = None):
        self.r = renderer
        self.info = info
        self.members = members
        self.root = root
        self.master = master
        self.name = name
        self.limits = dict(limits or {})
        self.args: list[TensorArg] = []
        self._arg_of: dict[tuple[int, bool], str] = {}
        self.lines: list[str] = []
        self._indent = 0
        self._scopes: list[dict] = [{}]
        self._n = 0
        self.bindings: dict[int, tuple[tuple[str, ...], str]] = {}
        self.global_size: tuple[int, ...] = (1,)
        self.local_size: tuple[int, ...] | None = None

    # -- graph helpers -----------------------------------------------------------------------
    def node(self, nid: int):
        return self.info.idx.nodes[nid]

    def attrs(self, nid: int) -> dict:
        return self.node(nid).attrs

    def shape(self, entry: int) -> tuple[int, ...]:
        return self.info.shapes[entry]

    def dtype(self, entry: int) -> str:
        return self.info.dtypes[entry]

    def ctype(self, entry: int) -> str:
        return self.r.ctype(self.dtype(entry))

    def inputs(self, nid: int) -> list[int]:
        return self.info.inputs(nid)

    def unsupported(self, nid: int, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(format_error(node_where(self.node(nid)), f"{self.r.dialect} "
                                               f"lowering: {why}"))

    # -- statements --------------------------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self._indent + line)

    @contextlib.contextmanager
    def block(self, header: str):
        """``header {`` ... ``}`` with a new memo scope (values inside stay inside)."""
        self.emit(header + " {")
        self._indent += 1
        self._scopes.append({})
        try:
            yield
        finally:
            self._scopes.pop()
            self._indent -= 1
            self.emit("}")

    def let(self, ctype: str, expr: str, prefix: str = "v", const: bool = True) -> str:
        name = self.fresh(prefix)
        self.emit(f"{'const ' if const else ''}{ctype} {name} = {expr};")
        return name

    def int_let(self, expr: str, prefix: str = "i") -> str:
        if expr.isidentifier() or expr.lstrip("-").isdigit():
            return expr
        return self.let(self.r.int_type, expr, prefix)

    # -- parameters --------------------------------------------------------------------------
    def tensor(self, entry: int, output: bool = False) -> str:
        """The C name of the kernel parameter bound to ``entry`` (added on first use)."""
        key = (entry, output)
        if key not in self._arg_of:
            name = f"{'out' if output else 'in'}{len(self.args)}"
            self.args.append(TensorArg(name, self.dtype(entry), entry, output))
            self._arg_of[key] = name
        return self._arg_of[key]

    # -- index arithmetic --------------------------------------------------------------------
    @staticmethod
    def linear(coords: Sequence[str], shape: Sequence[int]) -> str:
        """Row-major offset of ``coords`` in ``shape`` (dims of extent 1 contribute nothing)."""
        expr = ""
        for c, d in zip(coords, shape):
            if expr:
                expr = f"({expr}) * {d}" if d != 1 else expr
            if d != 1:
                expr = f"{expr} + {c}" if expr else str(c)
        return expr or "0"

    def delinearize(self, flat: str, shape: Sequence[int]) -> list[str]:
        """Coordinates of row-major offset ``flat`` in ``shape``, as int variables."""
        coords, stride = [], numel(shape)
        for k, d in enumerate(shape):
            stride //= max(int(d), 1)
            if d == 1:
                coords.append("0")
                continue
            expr = flat if stride == 1 else f"{flat} / {stride}"
            if k > 0 and numel(shape[:k]) > 1:
                expr = f"({expr}) % {d}"
            coords.append(self.int_let(expr, "c"))
        return coords

    @staticmethod
    def broadcast_coords(in_shape: Sequence[int], out_shape: Sequence[int],
                         coords: Sequence[str]) -> list[str]:
        """Coordinates into an operand broadcast (right-aligned, numpy rules) to the output."""
        off = len(out_shape) - len(in_shape)
        return ["0" if d == 1 else coords[off + j] for j, d in enumerate(in_shape)]

    # -- values ------------------------------------------------------------------------------
    def load(self, entry: int, coords: Sequence[str]) -> str:
        """Read ``entry`` (a kernel parameter) at ``coords``."""
        t = self.tensor(entry)
        return f"{t}[{self.linear(coords, self.shape(entry))}]"

    def value(self, entry: int, coords: Sequence[str]) -> str:
        """A C expression (usually a variable) holding ``entry`` at ``coords``."""
        from .rules import VALUE_RULES

        key = (entry, tuple(coords))
        for scope in reversed(self._scopes):
            if key in scope:
                return scope[key]
        bound = self.bindings.get(entry)
        if bound is not None and bound[0] == tuple(coords):
            return bound[1]
        nid = self.info.entry_node[entry]
        node = self.node(nid)
        if node.op is None or nid not in self.members:
            expr = self.load(entry, coords)
        else:
            rule = VALUE_RULES.get(node.op.name)
            if rule is None:
                raise self.unsupported(nid, f"op {node.op.name} has no value rule")
            expr = rule(self, nid, entry - self.info.entry(nid), list(coords))
        var = expr if _is_atom(expr) else self.let(self.ctype(entry), expr)
        self._scopes[-1][key] = var
        return var

    def store(self, coords: Sequence[str], acc: str, out_index: int = 0) -> None:
        """Store the root's output ``out_index`` at ``coords``; ``acc`` is the master's value
        there, threaded through the group's epilogue when the master is not the root."""
        root_entry = self.info.entry(self.root, out_index)
        if self.master != self.root:
            self.bindings[self.info.entry(self.master, 0)] = (tuple(coords), acc)
            with self.block(""):
                v = self.value(root_entry, coords)
                self._store(root_entry, coords, v)
            del self.bindings[self.info.entry(self.master, 0)]
        else:
            self._store(root_entry, coords, acc)

    def _store(self, entry: int, coords, v: str) -> None:
        out = self.tensor(entry, output=True)
        self.emit(f"{out}[{self.linear(coords, self.shape(entry))}] = "
                  f"{self.r.cast(v, self.dtype(entry))};")

    def finish(self) -> Kernel:
        src = self.r.render_kernel(self.name, self.args, self.lines, self.local_size)
        return Kernel(self.name, src, list(self.args), tuple(self.global_size),
                      None if self.local_size is None else tuple(self.local_size), self.root)


def _is_atom(expr: str) -> bool:
    return expr.isidentifier() or expr.replace(".", "", 1).replace("f", "").isdigit()


ValueRule = Callable[[KernelBuilder, int, int, list], str]
