"""Mini Flux.1: a rectified-flow (flow-matching) text-to-image transformer, trained to a validation-loss target.

The real benchmark (MLPerf Training v5.1 on) trains Flux.1-schnell's transformer (about 12B parameters) from
scratch on CC12M, with precomputed inputs: the images' VAE latents (16 channels), each caption's T5-XXL token
embeddings and its CLIP pooled embedding. A step draws a timestep ``t`` and noise ``e``, mixes
``x_t = (1 - t) x_0 + t e`` and regresses the velocity ``e - x_0`` (flow matching on straight paths); the
transformer sees image patches and text tokens together (double-stream blocks: each stream its own weights,
one joint attention over both; then single-stream blocks over the joined sequence), modulated by the
timestep and the pooled text embedding (adaptive layer norm), with rotary position embeddings and
RMS-normed queries and keys. The metric is the mean validation loss at fixed timesteps on COCO
(``averaged_validation_loss``), target 0.586. This mini keeps that model and recipe and scales the rest:

- the data are generated "latents" of 4 channels at 8x8 (a shape of a colour at a position, over a little
  noise) with captions from a small grammar ("a red disc at the top left"); the caption encoders are frozen
  and random (a token embedding, a mixing layer: the T5 stand-in; its mean through a projection: the
  CLIP-pooled stand-in), precomputed into the dataset as the real benchmark's embeddings are;
- the transformer: 2x2 patches, double-stream blocks with joint attention, single-stream blocks, 2-D RoPE
  over the image grid (text tokens at position 0), QK RMSNorm, adaLN-Zero modulation from the timestep's
  sinusoidal embedding plus the pooled text; no guidance embedding (schnell has none);
- training timesteps from the logit-normal distribution (SD3/Flux), AdamW with linear warm-up, gradient
  clipping at 1.0 as the reference; the validation loss is the mean over ``eval_timesteps`` equally spaced
  timesteps ``i / n`` (i = 0 .. n-1) with noise fixed by the dataset, so every evaluation sees the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlrepro.training.epoch_order import epoch_generator, shuffled_batches

# ---------------------------------------------------------------------------------------- data
COLOURS = ("red", "green", "blue", "yellow")
SHAPES = ("square", "disc", "bar", "cross")
PLACES = ("top left", "top right", "bottom left", "bottom right")
VOCAB = ("<pad>", "a", "at", "the", *COLOURS, *SHAPES, "top", "bottom", "left", "right")
COLOUR_NORM = 2.5  # the length of a colour's latent vector (the noise's spread is data.noise per channel)
_SHAPE_MASKS = np.array([  # 4x4 masks, one per shape
    [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]],
    [[0, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 0]],
    [[0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0]],
    [[0, 1, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0], [0, 1, 0, 0]],
], dtype=np.float32)


def caption_tokens(colour: int, shape: int, place: int) -> list[int]:
    words = ["a", COLOURS[colour], SHAPES[shape], "at", "the", *PLACES[place].split()]
    return [VOCAB.index(w) for w in words]


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """``train.npz`` / ``val.npz``: latents (n, C, 8, 8), T5-stand-in token embeddings (n, L, text_dim), pooled
    embeddings (n, pooled_dim), and for validation the fixed noise (n, C, 8, 8)."""
    d = params["data"]
    rng = np.random.default_rng(seed)
    channels, text_dim, pooled_dim = d["channels"], d["text_dim"], d["pooled_dim"]
    # Each colour: a latent direction of one length, so that every data seed draws pictures as far above the noise
    colours = rng.normal(size=(len(COLOURS), channels))
    colours = (COLOUR_NORM * colours / np.linalg.norm(colours, axis=1, keepdims=True)).astype(np.float32)
    # The frozen caption encoders (random, as stand-ins for T5-XXL and CLIP-L): fixed for the dataset.
    token_table = rng.normal(size=(len(VOCAB), text_dim))
    positions = rng.normal(size=(len(caption_tokens(0, 0, 0)), text_dim)) * 0.5
    mixing = rng.normal(size=(text_dim, text_dim)) / math.sqrt(text_dim)
    pooling = rng.normal(size=(text_dim, pooled_dim)) / math.sqrt(text_dim)
    scale = None
    for split, n in (("train", d["train_samples"]), ("val", d["val_samples"])):
        colour, shape, place = (rng.integers(0, k, size=n) for k in (len(COLOURS), len(SHAPES), len(PLACES)))
        latents = np.zeros((n, channels, 8, 8), np.float32)
        for i in range(n):
            r, c = divmod(int(place[i]), 2)
            picture = colours[colour[i]][:, None, None] * _SHAPE_MASKS[shape[i]]
            latents[i, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] = picture
        latents += d["noise"] * rng.normal(size=latents.shape).astype(np.float32)
        # Unit variance over the training set, as Flux scales its VAE latents (scaling and shift factors).
        scale = scale or float(latents.std())
        tokens = np.array([caption_tokens(*triple) for triple in zip(colour, shape, place, strict=True)])
        t5 = np.tanh((token_table[tokens] + positions) @ mixing).astype(np.float32)
        pooled = np.tanh(t5.mean(1) @ pooling).astype(np.float32)
        arrays = {"latents": latents / scale, "t5": t5, "pooled": pooled, "tokens": tokens.astype(np.int16)}
        if split == "val":  # the validation's noise is part of the dataset: every evaluation sees the same
            arrays["noise"] = rng.normal(size=latents.shape).astype(np.float32)
        np.savez(out_dir / f"{split}.npz", **arrays)


# ---------------------------------------------------------------------------------- flow matching
def noised(x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The rectified-flow path's point at ``t`` (one per sample): data at 0, noise at 1."""
    t = t.view(-1, *([1] * (x0.dim() - 1)))
    return (1 - t) * x0 + t * noise


def flow_matching_loss(model: nn.Module, x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor,
                       txt: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the predicted velocity against the path's, ``noise - x0``."""
    velocity = model(noised(x0, noise, t), t, txt, pooled)
    return F.mse_loss(velocity, noise - x0)


# --------------------------------------------------------------------------------------- model
def rope_angles(positions: torch.Tensor, dim: int, theta: float = 10_000.0) -> torch.Tensor:
    """Rotary angles (tokens, axes * dim / 2 / axes) for integer positions (tokens, axes): each axis its share."""
    per_axis = dim // positions.shape[1]
    freqs = theta ** (-torch.arange(0, per_axis, 2, dtype=torch.float32) / per_axis)
    return torch.cat([positions[:, a : a + 1].float() * freqs for a in range(positions.shape[1])], dim=1)


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate (b, heads, tokens, head_dim) pairs of features by ``angles`` (tokens, head_dim / 2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = angles.cos(), angles.sin()
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10_000.0) -> torch.Tensor:
    """Flux's sinusoidal embedding of ``1000 t``."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = 1000 * t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Modulation(nn.Module):
    """adaLN: shift, scale and gate vectors from the conditioning vector (zero at init: each block starts
    as the identity, adaLN-Zero)."""

    def __init__(self, hidden: int, count: int) -> None:
        super().__init__()
        self.count = count
        self.lin = nn.Linear(hidden, count * hidden)
        nn.init.zeros_(self.lin.weight)
        nn.init.zeros_(self.lin.bias)

    def forward(self, vec: torch.Tensor) -> list[torch.Tensor]:
        return [m[:, None, :] for m in self.lin(F.silu(vec)).chunk(self.count, dim=-1)]


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:]) * (1 + scale) + shift


class Attention(nn.Module):
    """QKV projection with RMS-normed queries and keys (Flux's QKNorm)."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.q_norm = nn.RMSNorm(hidden // heads)
        self.k_norm = nn.RMSNorm(hidden // heads)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return self.q_norm(q), self.k_norm(k), v


def joint_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Attention over the whole (text + image) sequence, with rotary positions; (b, tokens, hidden)."""
    out = F.scaled_dot_product_attention(apply_rope(q, angles), apply_rope(k, angles), v)
    return out.transpose(1, 2).flatten(2)


class DoubleStreamBlock(nn.Module):
    """Text and image each with their own weights (modulation, attention projections, MLP), attending jointly."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        width = int(hidden * mlp_ratio)
        self.img_mod, self.txt_mod = Modulation(hidden, 6), Modulation(hidden, 6)
        self.img_attn, self.txt_attn = Attention(hidden, heads), Attention(hidden, heads)
        self.img_proj, self.txt_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.img_mlp = nn.Sequential(nn.Linear(hidden, width), nn.GELU(approximate="tanh"), nn.Linear(width, hidden))
        self.txt_mlp = nn.Sequential(nn.Linear(hidden, width), nn.GELU(approximate="tanh"), nn.Linear(width, hidden))

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor,
                angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i_shift1, i_scale1, i_gate1, i_shift2, i_scale2, i_gate2 = self.img_mod(vec)
        t_shift1, t_scale1, t_gate1, t_shift2, t_scale2, t_gate2 = self.txt_mod(vec)
        iq, ik, iv = self.img_attn.qkv_heads(modulate(img, i_shift1, i_scale1))
        tq, tk, tv = self.txt_attn.qkv_heads(modulate(txt, t_shift1, t_scale1))
        # One attention over [text; image]: every token sees both streams.
        attn = joint_attention(torch.cat([tq, iq], 2), torch.cat([tk, ik], 2), torch.cat([tv, iv], 2), angles)
        t_attn, i_attn = attn[:, : txt.shape[1]], attn[:, txt.shape[1] :]
        img = img + i_gate1 * self.img_proj(i_attn)
        img = img + i_gate2 * self.img_mlp(modulate(img, i_shift2, i_scale2))
        txt = txt + t_gate1 * self.txt_proj(t_attn)
        txt = txt + t_gate2 * self.txt_mlp(modulate(txt, t_shift2, t_scale2))
        return img, txt


class SingleStreamBlock(nn.Module):
    """One set of weights over the joined sequence: attention and MLP in parallel from one projection."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.hidden, self.width = hidden, int(hidden * mlp_ratio)
        self.mod = Modulation(hidden, 3)
        self.attn = Attention(hidden, heads)
        self.mlp_in = nn.Linear(hidden, self.width)
        self.out = nn.Linear(hidden + self.width, hidden)

    def forward(self, x: torch.Tensor, vec: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.mod(vec)
        h = modulate(x, shift, scale)
        attn = joint_attention(*self.attn.qkv_heads(h), angles)
        return x + gate * self.out(torch.cat([attn, F.gelu(self.mlp_in(h), approximate="tanh")], dim=-1))


class Flux(nn.Module):
    def __init__(self, channels: int, text_dim: int, pooled_dim: int, hidden: int, heads: int, double_blocks: int,
                 single_blocks: int, mlp_ratio: float, patch: int = 2, grid: int = 8) -> None:
        super().__init__()
        self.channels, self.patch, self.grid, self.hidden, self.heads = channels, patch, grid, hidden, heads
        self.img_in = nn.Linear(channels * patch * patch, hidden)
        self.txt_in = nn.Linear(text_dim, hidden)
        self.time_in = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.vector_in = nn.Sequential(nn.Linear(pooled_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.double_stream = nn.ModuleList(DoubleStreamBlock(hidden, heads, mlp_ratio) for _ in range(double_blocks))
        self.single_stream = nn.ModuleList(SingleStreamBlock(hidden, heads, mlp_ratio) for _ in range(single_blocks))
        self.final_mod = Modulation(hidden, 2)
        self.final = nn.Linear(hidden, channels * patch * patch)
        nn.init.zeros_(self.final.weight)  # the velocity starts at zero (Flux's zero-initialised last layer)
        nn.init.zeros_(self.final.bias)
        side = grid // patch
        rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        self.register_buffer("img_ids", torch.stack([rows.flatten(), cols.flatten()], 1), persistent=False)

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.patch
        return x.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)

    def unpatchify(self, tokens: torch.Tensor) -> torch.Tensor:
        b, p, side, c = tokens.shape[0], self.patch, self.grid // self.patch, self.channels
        return tokens.view(b, side, side, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, c, self.grid, self.grid)

    def forward(self, x: torch.Tensor, t: torch.Tensor, txt: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        img, txt = self.img_in(self.patchify(x)), self.txt_in(txt)
        vec = self.time_in(timestep_embedding(t, self.hidden)) + self.vector_in(pooled)
        # Text tokens sit at position (0, 0), image patches at their grid cell (Flux's position ids).
        ids = torch.cat([torch.zeros(txt.shape[1], 2, dtype=torch.long, device=x.device), self.img_ids])
        angles = rope_angles(ids, self.hidden // self.heads)
        for block in self.double_stream:
            img, txt = block(img, txt, vec, angles)
        joined = torch.cat([txt, img], 1)
        for block in self.single_stream:
            joined = block(joined, vec, angles)
        img = joined[:, txt.shape[1] :]
        shift, scale = self.final_mod(vec)
        return self.unpatchify(self.final(modulate(img, shift, scale)))


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = False
    # open_flux1.yaml of the 6.0.0 rules asks for averaged_validation_loss; common.yaml for eval_accuracy
    eval_keys = ("averaged_validation_loss", "eval_accuracy")

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        d = params["data"]
        train, val = np.load(data_dir / "train.npz"), np.load(data_dir / "val.npz")

        def tensors(split: Any, *names: str) -> list[torch.Tensor]:
            return [torch.from_numpy(split[n]).to(device) for n in names]

        self.x0, self.t5, self.pooled = tensors(train, "latents", "t5", "pooled")
        self.v_x0, self.v_t5, self.v_pooled, self.v_noise = tensors(val, "latents", "t5", "pooled", "noise")
        self.model = Flux(d["channels"], d["text_dim"], d["pooled_dim"], params["hidden"], params["heads"],
                          params["double_blocks"], params["single_blocks"], params["mlp_ratio"]).to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.x0) / self.batch)
        self.eval_timesteps = torch.arange(params["eval_timesteps"], dtype=torch.float32) / params["eval_timesteps"]
        self.grad_clip_norm = params["gradient_clip_norm"]
        betas, eps, wd, lr, warmup = (tuple(params["adamw_betas"]), params["adamw_epsilon"],
                                      params["weight_decay"], params["lr"], params["warmup_steps"])
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=wd,
                                           foreach=True)  # one kernel per step for all tensors
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / warmup))
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "evaluation_frequency": self.steps_per_epoch * self.batch,  # samples between evaluations
            "opt_name": "adamw",
            "opt_adamw_beta_1": betas[0],
            "opt_adamw_beta_2": betas[1],
            "opt_adamw_epsilon": eps,
            "opt_adamw_weight_decay": wd,
            "opt_base_learning_rate": lr,
            "opt_learning_rate_warmup_steps": warmup,
            "opt_gradient_clip_norm": self.grad_clip_norm,
        }
        self.train_samples = len(self.x0)
        self.eval_samples = len(self.v_x0)

    def initialized_tensors(self) -> list[str]:
        return [name for name, _ in self.model.named_children()]

    def samples_count(self, epoch: int) -> int:
        return epoch * self.steps_per_epoch * self.batch

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        gen = epoch_generator(self.seed, epoch)
        for idx in shuffled_batches(len(self.x0), self.batch, gen, self.device):
            # Logit-normal timesteps (SD3 and Flux): most steps in the middle of the path.
            t = torch.sigmoid(torch.randn(len(idx), generator=gen)).to(self.device)
            noise = torch.randn(self.x0[idx].shape, generator=gen).to(self.device)
            yield idx, t, noise

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        idx, t, noise = batch
        return flow_matching_loss(self.model, self.x0[idx], noise, t, self.t5[idx], self.pooled[idx])

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        """The mean over the fixed timesteps of the validation set's loss (the dataset's fixed noise)."""
        self.model.eval()
        n = len(self.v_x0)
        losses = [flow_matching_loss(self.model, self.v_x0, self.v_noise, torch.full((n,), float(t)),
                                     self.v_t5, self.v_pooled).item() for t in self.eval_timesteps]
        return float(sum(losses) / len(losses))
