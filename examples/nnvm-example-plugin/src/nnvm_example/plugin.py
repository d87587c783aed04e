"""Entry point of nnvm-example-plugin (group ``nnvm``, name ``example``).

Adds an op with its shape rule and NumPy kernel, a rewrite pass that uses it, and a target
that lowers a graph to a flat step list (exported as the artifact member ``program.json``).
"""

from __future__ import annotations

import json

import numpy as np

from nnvm import hookimpl
from nnvm.graph_attrs import DERIVED
from nnvm.ir import Graph, make_node, node_map
from nnvm.op import OpPattern, define_op
from nnvm.ops.common import same_dtype, same_shape
from nnvm.params import Param
from nnvm.pass_manager import define_pass
from nnvm.runtime.module import Module


def swish(attrs, x):
    """NumPy reference kernel: x * sigmoid(beta * x), in the input's dtype."""
    return (x / (1.0 + np.exp(-attrs["beta"] * x))).astype(x.dtype)


def fuse_swish(graph: Graph) -> Graph:
    """Replace ``x * sigmoid(x)`` (either operand order) by ``example_swish(x)``."""
    def rewrite(node, inputs):
        if node.op is None or node.op.name not in ("elemwise_mul", "broadcast_mul"):
            return None
        for x, s in (inputs, inputs[::-1]):
            if s.node.op is not None and s.node.op.name == "sigmoid" and s.node.inputs[0] == x:
                return make_node("example_swish", [x], {"beta": 1.0}, name=node.name)
        return None

    # Per-entry attributes such as ``shape`` are now stale: the pass manager drops them
    # (the PassDef declares ``invalidates=DERIVED``).
    return Graph(node_map(graph, rewrite), graph.attrs)


class ExampleModule(Module):
    """Runs the lowered program (``[node id, input entries, output entries]`` per step)."""

    def __init__(self, graph, params, target, program=None):
        super().__init__(graph, params, target)
        idx = graph.index
        self.program = program or [
            [nid, [idx.entry_id(i, k) for i, k, _ in idx.inputs[nid]],
             [idx.entry_id(nid, k) for k in range(node.num_outputs)]]
            for nid, node in enumerate(idx.nodes) if node.op is not None]

    def _execute(self, feed):
        idx = self.graph.index
        vals = {idx.entry_id(n, 0): feed[idx.nodes[n].name] for n in idx.input_nodes}
        for nid, ins, outs in self.program:
            node = idx.nodes[nid]
            res = node.op.get_attr("FReference")(node.attrs, *[vals[e] for e in ins])
            vals.update(zip(outs, res if isinstance(res, tuple) else (res,)))
        return [vals[e] for e in idx.output_entries]

    def _num_kernels(self) -> int:
        return len(self.program)

    def _artifact_members(self) -> dict[str, bytes]:
        return {"program.json": json.dumps(self.program).encode()}


class ExampleBackend:
    """The ``example`` target: always available, never preferred over real targets."""

    name = "example"
    description = "example plugin: flat step list run with the reference kernels"
    priority = -1
    options: dict[str, str] = {}

    def is_available(self) -> str | None:
        return None

    def build(self, graph, params, target, config) -> ExampleModule:
        return ExampleModule(graph, params, str(target))

    def load(self, artifact) -> ExampleModule:
        program = json.loads(artifact.members["program.json"])
        return ExampleModule(artifact.graph(), artifact.params, artifact.manifest["target"],
                             program)


@hookimpl
def nnvm_ops() -> list:
    return [define_op("example_swish", doc="Swish activation, x * sigmoid(beta * x).",
                      params=[Param("beta", "float", 1.0, "slope inside the sigmoid")],
                      shape=same_shape, dtype=same_dtype, reference=swish,
                      pattern=OpPattern.ELEMWISE)]


@hookimpl
def nnvm_passes() -> list:
    return [define_pass("FuseSwish", fuse_swish, invalidates=DERIVED)]


@hookimpl
def nnvm_targets() -> list:
    return [ExampleBackend()]


@hookimpl
def nnvm_plugin_info() -> dict:
    return {"summary": "example: op example_swish, pass FuseSwish, target 'example'"}
