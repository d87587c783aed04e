"""FuseOps: NNVM's pattern rules, the diamond rule, and the group contract for backends."""

import pytest

from _numerics import setup
from nnvm import sym
from nnvm.testing.models import MODELS

V = sym.Variable


def _fuse(net, shapes, opt_level=2):
    g, _, _ = setup(net, shapes)
    return g.with_attrs(opt_level=opt_level).apply("FuseOps")


def _groups(g):
    """{root name: sorted member op names}."""
    idx, roots = g.index, g.attrs["group_root"]
    out = {}
    for nid, node in enumerate(idx.nodes):
        if node.op is not None:
            out.setdefault(idx.nodes[roots[nid]].name, []).append(node.op.name)
    return {k: sorted(v) for k, v in out.items()}


def check_contract(g):
    """The invariants docs/passes.md promises to backends."""
    idx = g.index
    root, master = g.attrs["group_root"], g.attrs["group_master"]
    outputs = {n for n, _, _ in idx.outputs}
    assert g.attrs["num_groups"] == len({root[n] for n in range(idx.num_nodes)
                                         if idx.nodes[n].op is not None})
    for nid, node in enumerate(idx.nodes):
        if node.op is None:
            assert root[nid] == master[nid] == -1
            continue
        assert root[nid] >= nid and root[root[nid]] == root[nid]
        assert root[master[nid]] == root[nid]  # the master is a member
        if root[nid] != nid:
            assert nid not in outputs
    for nid, ins in enumerate(idx.inputs):
        for i, _, _ in ins:
            if idx.nodes[i].op is not None and root[i] != i:
                assert root[i] == root[nid], "a non-root member is read outside its group"


def test_conv_bias_relu_residual_is_one_group_mastered_by_conv():
    x = V("x")
    c = sym.conv2d(x, channels=3, kernel_size=(3, 3), padding=(1, 1), name="conv")
    y = sym.relu(c + V("b", shape=(3, 1, 1)), name="act") + x
    g = _fuse(y, {"x": (1, 3, 4, 4)})
    assert g.attrs["num_groups"] == 1
    idx = g.index
    assert idx.nodes[g.attrs["group_master"][idx.node_id("act")]].name == "conv"
    check_contract(g)


def test_elementwise_chain_fuses_and_a_shared_node_is_realised():
    x = V("x")
    a = sym.exp(sym.relu(x), name="a")
    y = sym.Group([sym.tanh(a, name="t"), sym.sigmoid(a, name="s")])
    g = _fuse(y, {"x": (4,)})
    assert _groups(g) == {"a": ["exp", "relu"], "t": ["tanh"], "s": ["sigmoid"]}
    check_contract(g)


def test_diamond_rule():
    x = V("x")
    c = sym.conv2d(x, channels=2, kernel_size=(1, 1), name="conv")
    y = sym.elemwise_add(sym.elemwise_add(sym.relu(c), sym.exp(c)), sym.sigmoid(c), name="out")
    g = _fuse(y, {"x": (1, 2, 3, 3)})
    assert g.attrs["num_groups"] == 1
    idx = g.index
    assert idx.nodes[g.attrs["group_master"][idx.node_id("out")]].name == "conv"
    check_contract(g)


def test_opaque_and_out_elemwise_take_no_parents():
    x = V("x")
    y = sym.dense(sym.relu(x), units=3, name="fc")
    y = sym.dense(sym.softmax(y), units=2, name="fc2")
    g = _fuse(y, {"x": (2, 4)})
    assert len(_groups(g)) == 4
    check_contract(g)


def test_opt_level_0_is_one_group_per_op():
    x = V("x")
    g = _fuse(sym.exp(sym.relu(x) + 1.0), {"x": (3,)}, opt_level=0)
    assert g.attrs["num_groups"] == 3
    check_contract(g)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_families_fuse_and_keep_the_contract(name):
    import nnvm

    net, params, shapes = MODELS[name]()
    lib = nnvm.compiler.build(net, target="reference", shape=shapes, params=params,
                              opt_level=3)
    g = lib.graph
    check_contract(g)
    assert g.attrs["num_groups"] < lib.stats()["num_nodes"]
