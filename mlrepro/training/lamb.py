"""LAMB (You et al., 2019), the optimizer of the mini bert and rnnt: Adam's update plus decoupled weight
decay, rescaled per tensor by the trust ratio ||w|| / ||update|| so that every layer moves by a similar
fraction of its norm whatever the scale of its gradient (what lets the references train with a very
large batch).

Weight decay is per parameter group (biases and LayerNorm weights go in a group with ``weight_decay=0``).
The references differ in whether such a group also takes the trust ratio; that is ``adapt_undecayed``,
the ``use_nvlamb`` flag of apex's ``FusedLAMB``: bert's reference (TF LAMB) rescales every tensor, rnnt's
(``FusedLAMB`` with ``use_nvlamb=False``) gives the undecayed group plain Adam steps, so its biases are not
held at their tiny initial norm.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch


def decay_groups(params: Iterable[torch.nn.Parameter]) -> list[dict[str, Any]]:
    """The usual LAMB split: weight matrices and embeddings decay; biases and LayerNorm weights (the
    vectors) do not."""
    params = list(params)
    return [{"params": [p for p in params if p.ndim > 1]},
            {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]


class Lamb(torch.optim.Optimizer):
    """The ``_foreach`` calls apply each line to all the tensors of a group at once: with models this
    small a per-tensor Python loop would cost as much as the forward and backward passes together."""

    def __init__(self, params: Any, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                 adapt_undecayed: bool) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "adapt_undecayed": adapt_undecayed})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            (b1, b2), eps, decay = group["betas"], group["eps"], group["weight_decay"]
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            for p in params:
                if not self.state[p]:
                    self.state[p].update(m=torch.zeros_like(p), v=torch.zeros_like(p))
            m = [self.state[p]["m"] for p in params]
            v = [self.state[p]["v"] for p in params]
            group["step"] = t = group.get("step", 0) + 1
            torch._foreach_lerp_(m, grads, 1 - b1)  # m = b1 m + (1 - b1) g
            torch._foreach_mul_(v, b2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - b2)  # v = b2 v + (1 - b2) g^2
            # Adam's direction with bias correction: m_hat / (sqrt(v_hat) + eps).
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, math.sqrt(1 - b2**t))
            torch._foreach_add_(denom, eps)
            update = torch._foreach_div(m, denom)
            torch._foreach_div_(update, 1 - b1**t)
            if decay != 0:  # decoupled weight decay
                torch._foreach_add_(update, params, alpha=decay)
            if decay != 0 or group["adapt_undecayed"]:
                w_norm = torch.stack(torch._foreach_norm(params))
                u_norm = torch.stack(torch._foreach_norm(update))
                # Trust ratio 1 where a norm is 0 (zero-initialized biases at the first step): plain Adam.
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                torch._foreach_mul_(update, list(trust.unbind()))
            torch._foreach_add_(params, update, alpha=-group["lr"])
