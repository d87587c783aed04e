"""Optimisers as graph rewrites, exactly as TinyFlow: gradients + assign updates, grouped.

``minimize(loss)`` finds the variables ``loss`` reads (placeholders excluded), asks NNVM's
Gradient pass for their gradients, and returns one ``Operation`` grouping an ``assign`` per
variable (and per optimiser slot). Running it in a Session performs one training step; the
Session writes every assigned value back into its state.
"""

from __future__ import annotations

from typing import Sequence

from nnvm import symbol as _sym
from nnvm.symbol import Symbol

from ._base import Operation, TinyFlowError, Variable, assign, gradients, group, \
    trainable_variables, zeros


def _rate(learning_rate: float | Symbol) -> float | Symbol:
    """A float, or a Symbol (e.g. a placeholder of shape (1,) fed each step, for a decay
    schedule without rebuilding the graph)."""
    return learning_rate if isinstance(learning_rate, Symbol) else float(learning_rate)


class Optimizer:
    """Common part: which variables, and the gradient call (with the memory option).

    Args:
        sublinear_memory: differentiate with the Gradient pass's ``grad_mirror="sublinear"``
            policy: forward segments are recomputed in the backward pass, so activation
            memory grows with O(sqrt(depth)) instead of O(depth) for about one extra
            forward pass.
        name: prefix of the optimiser's slot variables.
    """

    def __init__(self, sublinear_memory: bool = False, name: str = "Optimizer"):
        self.sublinear_memory = sublinear_memory
        self.name = name

    def compute_gradients(self, loss: Symbol, var_list: Sequence[Symbol] | None = None
                          ) -> list[tuple[Symbol, Symbol]]:
        """``[(gradient, variable), ...]`` for ``var_list`` (default: all of ``loss``)."""
        variables = list(var_list) if var_list is not None else trainable_variables(loss)
        if not variables:
            raise TinyFlowError(f"{self.name}.minimize: the loss reads no variables; nothing "
                                f"to train")
        grads = gradients(loss, variables,
                          mirror="sublinear" if self.sublinear_memory else None)
        return list(zip(grads, variables))

    def minimize(self, loss: Symbol, var_list: Sequence[Symbol] | None = None) -> Operation:
        return self.apply_gradients(self.compute_gradients(loss, var_list))

    def apply_gradients(self, grads_and_vars) -> Operation:
        raise NotImplementedError


class GradientDescentOptimizer(Optimizer):
    """``var <- var - learning_rate * grad``; ``learning_rate`` a float or a Symbol."""

    def __init__(self, learning_rate: float = 0.01, sublinear_memory: bool = False,
                 name: str = "GradientDescent"):
        super().__init__(sublinear_memory, name)
        self.learning_rate = _rate(learning_rate)

    def apply_gradients(self, grads_and_vars) -> Operation:
        return group(*[assign(v, v - self.learning_rate * g) for g, v in grads_and_vars])


class AdamOptimizer(Optimizer):
    """Adam (Kingma & Ba 2015) with bias correction folded into the step size, as TinyFlow.

    Slots: a step counter ``<name>_t`` and per variable ``<name>_m_<var>``, ``<name>_v_<var>``,
    all initialised to zeros by ``initialize_all_variables()`` (create the optimiser before
    calling it).
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, sublinear_memory: bool = False, name: str = "Adam"):
        super().__init__(sublinear_memory, name)
        self.learning_rate = _rate(learning_rate)
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)

    def apply_gradients(self, grads_and_vars) -> Operation:
        t = Variable(zeros((1,)), name=f"{self.name}_t")
        t_new = assign(t, t + 1.0)
        # lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), shape (1,): broadcasts over each var
        rate = _sym.sqrt(1.0 - self.beta2 ** t_new) / (1.0 - self.beta1 ** t_new)
        lr_t = self.learning_rate * rate
        updates = []
        for g, v in grads_and_vars:
            vname = v.outputs[0].node.name
            m = Variable(_sym.zeros_like(v), name=f"{self.name}_m_{vname}")
            s = Variable(_sym.zeros_like(v), name=f"{self.name}_v_{vname}")
            m_new = assign(m, self.beta1 * m + (1.0 - self.beta1) * g)
            s_new = assign(s, self.beta2 * s + (1.0 - self.beta2) * (g * g))
            updates.append(assign(v, v - lr_t * m_new / (_sym.sqrt(s_new) + self.epsilon)))
        return group(*updates)
