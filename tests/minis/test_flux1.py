"""Unit tests of the mini Flux.1's defining parts: the flow-matching loss at t = 0 and 1 against the formula,
joint text/image attention, the 2-D rotary positions, patches, and the generated captioned latents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir

flux = load_module("flux1")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def defaults() -> dict[str, Any]:
    return yaml.safe_load((mini_dir("flux1") / "defaults.yaml").read_text())


def small_model(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    p, d = defaults(), defaults()["data"]
    model = flux.Flux(d["channels"], d["text_dim"], d["pooled_dim"], p["hidden"], p["heads"], 1, 1, p["mlp_ratio"])
    for param in model.parameters():  # away from the zero initialisation, so that every input matters
        torch.nn.init.normal_(param, std=0.3)
    return model


class Recorder(torch.nn.Module):
    """Returns a fixed velocity and keeps what it was given."""

    def __init__(self, velocity: torch.Tensor) -> None:
        super().__init__()
        self.velocity, self.seen = velocity, None

    def forward(self, x: torch.Tensor, t: torch.Tensor, txt: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        self.seen = (x.clone(), t.clone())
        return self.velocity


def inputs(n: int = 3, seed: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 4, 8, 8, generator=g), torch.randn(n, 4, 8, 8, generator=g),
            torch.randn(n, 9, 16, generator=g), torch.randn(n, 16, generator=g))


@pytest.mark.parametrize("t", [0.0, 1.0])
def test_the_loss_at_the_ends_of_the_path_is_the_formulas(t: float) -> None:
    x0, noise, txt, pooled = inputs()
    velocity = torch.randn_like(x0)
    model = Recorder(velocity)
    loss = flux.flow_matching_loss(model, x0, noise, torch.full((3,), t), txt, pooled)
    seen_x, seen_t = model.seen
    # t = 0: the model sees the data itself; t = 1: pure noise. The target is always noise - data.
    assert torch.equal(seen_x, x0 if t == 0 else noise) and torch.equal(seen_t, torch.full((3,), t))
    expected = ((velocity - (noise - x0)) ** 2).sum().item() / x0.numel()
    assert loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("t", [0.0, 1.0])
def test_the_real_model_loss_at_the_ends_is_the_formulas(t: float) -> None:
    x0, noise, txt, pooled = inputs()
    model = small_model()
    ts = torch.full((3,), t)
    with torch.no_grad():
        loss = flux.flow_matching_loss(model, x0, noise, ts, txt, pooled).item()
        v = model(x0 if t == 0 else noise, ts, txt, pooled)
    assert loss == pytest.approx(((v - noise + x0) ** 2).mean().item(), rel=1e-6)
    # A fresh model (zero last layer, adaLN-Zero) predicts no velocity: the loss is E|noise - x0|^2 at any t.
    fresh = flux.Flux(4, 16, 16, 32, 2, 1, 1, 2.0)
    with torch.no_grad():
        assert flux.flow_matching_loss(fresh, x0, noise, ts, txt, pooled).item() == pytest.approx(
            ((noise - x0) ** 2).mean().item(), rel=1e-6)


def test_the_path_mixes_data_and_noise_linearly() -> None:
    x0, noise, _, _ = inputs()
    t = torch.tensor([0.25, 0.5, 0.75])
    assert torch.allclose(flux.noised(x0, noise, t), x0 + t.view(-1, 1, 1, 1) * (noise - x0), atol=1e-6)


def test_image_tokens_attend_to_the_text_and_the_text_matters() -> None:
    model = small_model()
    x0, _, txt, pooled = inputs(n=1)
    t = torch.tensor([0.5])
    with torch.no_grad():
        base = model(x0, t, txt, pooled)
        other_text = txt.clone()
        other_text[:, 3] += 1.0  # one token of the caption changes; the pooled embedding does not
        changed = model(x0, t, other_text, pooled)
    assert not torch.allclose(base, changed, atol=1e-4)  # through the joint attention alone


def test_rotary_positions_rotate_image_tokens_and_leave_text_at_zero() -> None:
    ids = torch.tensor([[0, 0], [0, 0], [1, 2], [3, 1]])
    angles = flux.rope_angles(ids, 8)
    assert angles.shape == (4, 4) and torch.equal(angles[:2], torch.zeros(2, 4))
    x = torch.randn(1, 1, 4, 8)
    rotated = flux.apply_rope(x, angles)
    assert torch.equal(rotated[..., :2, :], x[..., :2, :])  # text tokens: unchanged
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation keeps the norm
    assert not torch.allclose(rotated[..., 2:, :], x[..., 2:, :])


def test_patches_round_trip() -> None:
    model = flux.Flux(4, 16, 16, 32, 2, 1, 1, 2.0)
    x = torch.randn(2, 4, 8, 8)
    tokens = model.patchify(x)
    assert tokens.shape == (2, 16, 16)
    assert torch.equal(tokens[0, 0], x[0, :, :2, :2].flatten())  # the first patch: the top-left 2x2 of each channel
    assert torch.equal(model.unpatchify(tokens), x)


def test_generated_data_is_deterministic_and_captioned(tmp_path: Path) -> None:
    params = {"data": {**defaults()["data"], "train_samples": 64, "val_samples": 16}}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        flux.generate_data(tmp_path / name, params, 3)
    for split in ("train.npz", "val.npz"):
        assert (tmp_path / "a" / split).read_bytes() == (tmp_path / "b" / split).read_bytes()
    val = np.load(tmp_path / "a" / "val.npz")
    assert val["latents"].shape == (16, 4, 8, 8) and val["noise"].shape == (16, 4, 8, 8)
    assert val["t5"].shape == (16, 7, 16) and val["pooled"].shape == (16, 16)
    words = [flux.VOCAB[i] for i in val["tokens"][0]]
    assert words[0] == "a" and words[1] in flux.COLOURS and words[2] in flux.SHAPES
    # The picture sits in the quadrant its caption names: elsewhere only the small noise remains.
    train = np.load(tmp_path / "a" / "train.npz")
    lat, toks = train["latents"], train["tokens"]
    for i in range(8):
        place = " ".join(flux.VOCAB[j] for j in toks[i][-2:])
        r, c = divmod(flux.PLACES.index(place), 2)
        inside = np.abs(lat[i, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4]).max()
        outside = np.abs(np.delete(np.delete(lat[i], np.s_[4 * r : 4 * r + 4], 1), np.s_[4 * c : 4 * c + 4], 2))
        assert inside > 4 * outside.mean()
