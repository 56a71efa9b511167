"""The LAMB optimizer of the mini bert and rnnt (mlrepro.training.lamb) against a per-tensor reference, in
both of its configurations."""

from __future__ import annotations

import pytest
import torch

from mlrepro.training.lamb import Lamb, decay_groups


def reference_lamb_step(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int, lr: float,
                        b1: float, b2: float, eps: float, wd: float, adapt: bool) -> torch.Tensor:
    """LAMB for one tensor, written out plainly."""
    m.mul_(b1).add_((1 - b1) * g)
    v.mul_(b2).add_((1 - b2) * g * g)
    u = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
    u = u + wd * p
    if not (wd or adapt):
        return p - lr * u
    ratio = p.norm() / u.norm() if p.norm() > 0 and u.norm() > 0 else torch.tensor(1.0)
    return p - lr * ratio * u


@pytest.mark.parametrize("adapt_undecayed", [True, False], ids=["bert", "rnnt"])
def test_lamb_matches_a_per_tensor_reference(adapt_undecayed: bool) -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(5, 3))
    b = torch.nn.Parameter(torch.zeros(3))  # zero norm: trust ratio falls back to 1
    opt = Lamb(decay_groups([w, b]), lr=0.1, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.05,
               adapt_undecayed=adapt_undecayed)
    ref = {"w": (w.detach().clone(), torch.zeros(5, 3), torch.zeros(5, 3), 0.05),
           "b": (b.detach().clone(), torch.zeros(3), torch.zeros(3), 0.0)}  # the vector does not decay
    for t in range(1, 4):
        gw, gb = torch.randn(5, 3), torch.randn(3)
        w.grad, b.grad = gw.clone(), gb.clone()
        opt.step()
        for name, g in (("w", gw), ("b", gb)):
            p, m, v, wd = ref[name]
            ref[name] = (reference_lamb_step(p, g, m, v, t, 0.1, 0.9, 0.99, 1e-6, wd, adapt_undecayed), m, v, wd)
        assert torch.allclose(w.detach(), ref["w"][0], atol=1e-6)
        assert torch.allclose(b.detach(), ref["b"][0], atol=1e-6)
    # Each step moves a matrix by lr times its norm: the layer-wise trust ratio at work. The bias, now
    # non-zero, moves so too only where the undecayed tensors take the trust ratio.
    before_w, before_b = w.detach().clone(), b.detach().clone()
    w.grad, b.grad = torch.randn(5, 3), torch.randn(3)
    opt.step()
    assert (w.detach() - before_w).norm().item() == pytest.approx(0.1 * before_w.norm().item(), rel=1e-4)
    bias_step = (b.detach() - before_b).norm().item()
    assert (bias_step == pytest.approx(0.1 * before_b.norm().item(), rel=1e-4)) == adapt_undecayed


def test_decay_groups_split_matrices_from_vectors() -> None:
    layer, norm = torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)
    matrices, vectors = decay_groups([*layer.parameters(), *norm.parameters()])
    assert matrices == {"params": [layer.weight]}
    assert vectors["weight_decay"] == 0.0
    assert vectors["params"] == [layer.bias, norm.weight, norm.bias]
