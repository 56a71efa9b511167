"""The parts of the decoder-only minis (Llama 3.1, Llama 2 + LoRA, gpt-oss, DeepSeek-V3), written once.

nanoGPT-style building blocks, each as the papers define it, small enough to read in one sitting:

- :class:`RMSNorm` and rotary position embeddings (:func:`rope_tables`, :func:`apply_rope`);
- :class:`Attention`: causal grouped-query attention (fewer key/value heads than query heads, each shared by
  a group of query heads), with optional :class:`LoRALinear` adapters on its four projections; over packed
  sequences, attention stays within each document (:func:`document_attention`);
- :class:`SwiGLU`: the gated feed-forward network;
- :class:`MoE`: a mixture of SwiGLU experts with top-k routing, an expert capacity (tokens over it are
  dropped: the residual carries them) and the Switch-style load-balancing loss, optionally with always-on
  shared experts (DeepSeekMoE);
- :class:`LatentAttention`: DeepSeek's multi-head latent attention, whose key/value cache is one compressed
  latent per token plus one shared rotary key;
- :class:`Decoder`: embeddings, pre-norm blocks, final norm, untied output head.

Shapes: ``b`` batch, ``t`` positions, ``d`` model width, ``h`` heads, ``hd`` head width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x / rms(x) * weight, in one kernel
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


# ------------------------------------------------------------------------------------------------ RoPE
def rope_tables(head_dim: int, length: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, (length, head_dim / 2): pair i of a head turns by pos * theta^(-2i/hd)."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) pair of ``x`` (b, h, t, hd) by its position's angle: q.k then depends on the
    positions' difference only."""
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.flatten(-2)


# ------------------------------------------------------------------------------------------------ LoRA
class LoRALinear(nn.Module):
    """A frozen linear map plus a trainable low-rank update: y = W x + (alpha / r) B A x (Hu et al. 2021).
    B starts at zero, so the adapted model starts as the base one."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        if self.base.bias is not None:
            self.base.bias.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as peft's default
        self.scaling = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.T @ self.lora_b.T) * self.scaling


# ------------------------------------------------------------------------------------------- attention
class Attention(nn.Module):
    """Causal grouped-query attention: ``heads`` query heads share ``kv_heads`` key/value heads. With a
    ``window``, each position sees only itself and the ``window - 1`` before it (gpt-oss's banded layers).
    With a ``document`` length, the sequence is a pack of documents of that many tokens and no position sees
    another document's (document masking); the rotary positions still run over the whole sequence."""

    def __init__(self, dim: int, heads: int, kv_heads: int, window: int = 0, document: int = 0) -> None:
        super().__init__()
        if dim % heads or heads % kv_heads:
            raise ValueError(f"heads ({heads}) must divide the width ({dim}) and be a multiple of "
                             f"kv_heads ({kv_heads})")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.window, self.document = window, document
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

    def add_lora(self, rank: int, alpha: float) -> None:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, LoRALinear(getattr(self, name), rank, alpha))

    def project(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (b, heads, t, hd), k and v (b, kv_heads, t, hd), RoPE applied to q and k."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope[0][:t], rope[1][:t]
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.project(x, rope)
        if self.document and t > self.document:
            y = document_attention(q, k, v, self.document, self.window)
        elif self.window and t > self.window:
            group = self.heads // self.kv_heads  # each key/value head serves this many query heads
            y = banded_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), self.window)
        else:  # enable_gqa: query head i reads key/value head i // (heads / kv_heads)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


def band_mask(length: int, window: int) -> torch.Tensor:
    """(length, length) bool: position i sees j when i - window < j <= i."""
    i = torch.arange(length)
    diff = i[:, None] - i[None, :]
    return (diff >= 0) & (diff < window)


def banded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Sliding-window causal attention in O(t * window): the positions are cut into blocks of ``window``, and
    each block's queries attend to the keys of their own block and the block before, masked to the band.
    The same result as full attention under :func:`band_mask`, without the (t, t) matrix."""
    b, h, t, hd = q.shape
    if t % window:
        raise ValueError(f"sliding-window attention needs a length ({t}) that is a multiple of the window ({window})")
    n = t // window

    def blocks(x: torch.Tensor) -> torch.Tensor:  # (b, h, t, hd) -> (b, h, n, 2 * window, hd): previous + own
        x = x.view(b, h, n, window, hd)
        return torch.cat([F.pad(x, (0, 0, 0, 0, 1, 0))[:, :, :-1], x], dim=3)

    # Query i of a block is at offset window + i of its keys; it sees offsets i + 1 .. window + i.
    offset = torch.arange(2 * window, device=q.device)
    row = torch.arange(window, device=q.device)[:, None]
    mask = ((offset > row) & (offset <= row + window)).expand(n, window, 2 * window).clone()
    mask[0, :, :window] = False  # the first block has no block before it
    y = F.scaled_dot_product_attention(q.view(b, h, n, window, hd), blocks(k), blocks(v), attn_mask=mask)
    return y.view(b, h, t, hd)


def document_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, document: int, window: int = 0
                       ) -> torch.Tensor:
    """Causal attention within each document of a packed sequence, computed document by document.

    ``q`` (b, heads, t, hd), ``k`` and ``v`` (b, kv_heads, t, hd), RoPE already applied at the packed positions,
    ``t`` a multiple of ``document``. Position i sees j when both are in the same document and j <= i (and
    i - j < ``window``, where one is given): the attention under a block-diagonal causal (banded) mask over the
    t positions, whose blocks are computed alone, at the cost of the documents rather than of t^2. The
    rotary positions make the scores depend on i - j only, so a document's result is the same wherever in
    the pack it sits."""
    b, _, t, hd = q.shape
    if t % document:
        raise ValueError(f"a packed sequence of {t} tokens is not a whole number of {document}-token documents")
    n = t // document

    def documents(x: torch.Tensor) -> torch.Tensor:  # (b, h, t, hd) -> (b * n, h, document, hd): a batch of documents
        return x.view(b, x.shape[1], n, document, hd).transpose(1, 2).reshape(b * n, x.shape[1], document, hd)

    if window and window < document:
        mask = band_mask(document, window).to(q.device)
        y = F.scaled_dot_product_attention(documents(q), documents(k), documents(v), attn_mask=mask, enable_gqa=True)
    else:
        y = F.scaled_dot_product_attention(documents(q), documents(k), documents(v), is_causal=True, enable_gqa=True)
    return y.view(b, n, q.shape[1], document, hd).transpose(1, 2).reshape(b, q.shape[1], t, hd)


class LatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2/V3): keys and values are up-projected from one compressed
    latent per token (``kv_rank`` wide, RMS-normed), and the position enters through a separate small rotary
    part (``rope_dim``) of the query and of one key shared by all heads. The cache of a decoding step is then
    the latent and the shared rotary key: ``kv_rank + rope_dim`` numbers per token, instead of
    ``2 * heads * head_dim``. Queries go through their own low-rank bottleneck (``q_rank``)."""

    def __init__(self, dim: int, heads: int, head_dim: int, rope_dim: int, kv_rank: int, q_rank: int) -> None:
        super().__init__()
        self.heads, self.head_dim, self.rope_dim, self.kv_rank = heads, head_dim, rope_dim, kv_rank
        self.q_down = nn.Linear(dim, q_rank, bias=False)
        self.q_norm = RMSNorm(q_rank)
        self.q_up = nn.Linear(q_rank, heads * (head_dim + rope_dim), bias=False)
        self.kv_down = nn.Linear(dim, kv_rank + rope_dim, bias=False)  # the latent and the shared rotary key
        self.kv_norm = RMSNorm(kv_rank)
        self.kv_up = nn.Linear(kv_rank, heads * 2 * head_dim, bias=False)  # per-head keys (no position) and values
        self.o_proj = nn.Linear(heads * head_dim, dim, bias=False)

    def compress(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], start: int = 0) -> torch.Tensor:
        """The cache entries of the tokens ``x`` at positions start..: (b, t, kv_rank + rope_dim)."""
        t = x.shape[1]
        latent, k_rope = self.kv_down(x).split([self.kv_rank, self.rope_dim], dim=-1)
        cos, sin = rope[0][start : start + t], rope[1][start : start + t]
        k_rope = apply_rope(k_rope.unsqueeze(1), cos, sin).squeeze(1)
        return torch.cat([self.kv_norm(latent), k_rope], dim=-1)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                cache: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend from ``x`` (the tokens after those in ``cache``) to the cache and to themselves, causally.
        Returns the output and the cache grown by ``x``'s entries."""
        b, t, _ = x.shape
        start = 0 if cache is None else cache.shape[1]
        entries = self.compress(x, rope, start)
        cache = entries if cache is None else torch.cat([cache, entries], dim=1)
        s = cache.shape[1]
        latent, k_rope = cache.split([self.kv_rank, self.rope_dim], dim=-1)
        kv = self.kv_up(latent).view(b, s, self.heads, 2 * self.head_dim).transpose(1, 2)
        k_nope, v = kv.split([self.head_dim, self.head_dim], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(1).expand(b, self.heads, s, self.rope_dim)], dim=-1)
        q = self.q_up(self.q_norm(self.q_down(x))).view(b, t, self.heads, self.head_dim + self.rope_dim)
        q_nope, q_rope = q.transpose(1, 2).split([self.head_dim, self.rope_dim], dim=-1)
        q_rope = apply_rope(q_rope, rope[0][start : start + t], rope[1][start : start + t])
        q = torch.cat([q_nope, q_rope], dim=-1)
        if start == 0:  # no cache before: plain causal attention, through the fused kernel, which wants the
            # values as wide as the queries and keys: padded with zeros, as DeepSeek's flash-attention path does
            v = F.pad(v, (0, self.rope_dim))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)[..., : self.head_dim]
        else:  # query i (position start + i) sees cache positions 0 .. start + i
            mask = torch.ones(t, s, dtype=torch.bool, device=x.device).tril(diagonal=start)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1)), cache


# ----------------------------------------------------------------------------------------- feed-forward
class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@dataclass
class Routing:
    """One MoE forward's routing, kept for the load-balancing loss and for inspection."""

    experts: torch.Tensor  # (tokens, top_k): the experts each token chose
    weights: torch.Tensor  # (tokens, top_k): their mixing weights
    kept: torch.Tensor  # (tokens, top_k) bool: False where the expert was full (the token skips it)
    aux_loss: torch.Tensor  # the load-balancing loss

    def combine(self, n_experts: int) -> torch.Tensor:
        """(tokens, experts): each token's weight on each expert, zero where it did not go."""
        slots = F.one_hot(self.experts, n_experts) * (self.weights * self.kept)[..., None]
        return slots.sum(1)


class Experts(nn.Module):
    """``n`` SwiGLU experts with their weights stacked, so that one batched product runs them all."""

    def __init__(self, n: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Parameter(torch.empty(n, dim, hidden))
        self.up_proj = nn.Parameter(torch.empty(n, dim, hidden))
        self.down_proj = nn.Parameter(torch.empty(n, hidden, dim))

    def __len__(self) -> int:
        return self.gate_proj.shape[0]

    def forward(self, x: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Each token's kept experts on ``x`` (tokens, d), mixed by their weights: the tokens are gathered by
        expert, each expert runs on its own tokens only, and the weighted outputs are added back in place
        (top 2 of 8: a quarter of the work of running every expert on every token)."""
        n, k = routing.experts.shape
        kept = routing.kept.flatten()
        token = torch.arange(n, device=x.device).repeat_interleave(k)[kept]
        expert, weight = routing.experts.flatten()[kept], routing.weights.flatten()[kept]
        order = torch.argsort(expert, stable=True)  # by expert, each expert's tokens in token order
        token, weight = token[order], weight[order]
        counts = torch.bincount(expert, minlength=len(self)).tolist()
        out = [(F.silu(h @ self.gate_proj[e]) * (h @ self.up_proj[e])) @ self.down_proj[e]
               for e, h in enumerate(x[token].split(counts))]
        return torch.zeros_like(x).index_add_(0, token, torch.cat(out) * weight[:, None])


class MoE(nn.Module):
    """Top-k routed SwiGLU experts (+ optional shared experts every token goes through).

    Each token's router logits pick its ``top_k`` experts; their weights are the softmax over the chosen
    logits (gpt-oss; DeepSeek-V3 normalises its chosen sigmoid scores to the same effect). An expert takes at
    most ``capacity = ceil(capacity_factor * tokens * top_k / experts)`` tokens, first come first served in
    token order; a token over capacity skips that expert. The load-balancing loss is Switch Transformer's
    ``experts * sum_e f_e * P_e`` (f_e: share of the routed slots sent to e, P_e: mean router probability of
    e), 1 when the load is even.
    """

    def __init__(self, dim: int, hidden: int, experts: int, top_k: int, capacity_factor: float,
                 shared_experts: int = 0) -> None:
        super().__init__()
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k ({top_k}) must be between 1 and the number of experts ({experts})")
        self.top_k, self.capacity_factor = top_k, capacity_factor
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = Experts(experts, dim, hidden)
        self.shared = SwiGLU(dim, hidden * shared_experts) if shared_experts else None
        self.routing: Routing | None = None

    def capacity(self, tokens: int) -> int:
        return math.ceil(self.capacity_factor * tokens * self.top_k / len(self.experts))

    def route(self, x: torch.Tensor) -> Routing:
        """``x`` (tokens, d) -> the routing of each token."""
        logits = self.router(x)
        top, experts = logits.topk(self.top_k, dim=-1)
        weights = top.softmax(-1)
        n_exp = len(self.experts)
        # Position of each (token, slot) in its expert's queue: slots counted in token order, then slot order.
        flat = F.one_hot(experts, n_exp).reshape(-1, n_exp)
        position = (flat.cumsum(0) - 1).mul(flat).sum(-1).view(experts.shape)
        kept = position < self.capacity(x.shape[0])
        f = flat.float().mean(0)  # share of the routed slots sent to each expert
        p = logits.softmax(-1).mean(0)
        return Routing(experts, weights, kept, n_exp * (f * p).sum())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        self.routing = r = self.route(x)
        out = self.experts(x, r)
        if self.shared is not None:
            out = out + self.shared(x)
        return out.view(shape)


# --------------------------------------------------------------------------------------------- decoder
@dataclass
class DecoderConfig:
    vocab: int
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    max_length: int
    rope_theta: float = 500000.0  # Llama 3.1's base
    init_std: float = 0.02
    # MoE (experts > 0): every layer's feed-forward is a mixture
    experts: int = 0
    top_k: int = 1
    capacity_factor: float = 1.0
    shared_experts: int = 0
    dense_layers: int = 0  # the first layers keep a dense feed-forward (DeepSeek-V3: 3 of 61)
    # multi-head latent attention (kv_rank > 0) instead of grouped-query attention
    kv_rank: int = 0
    q_rank: int = 0
    rope_dim: int = 0
    # gpt-oss: every other layer (the first, the third, ...) attends within a sliding window of this length
    sliding_window: int = 0
    # packed sequences: documents of this many tokens, attention within each (0: one text per sequence)
    document_length: int = 0


class Block(nn.Module):
    def __init__(self, c: DecoderConfig, moe: bool, window: int = 0) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(c.dim)
        self.attn: Attention | LatentAttention
        if c.kv_rank:
            if c.document_length:
                raise ValueError("packed sequences (document_length) are defined for grouped-query attention only")
            self.attn = LatentAttention(c.dim, c.heads, c.dim // c.heads, c.rope_dim, c.kv_rank, c.q_rank)
        else:
            self.attn = Attention(c.dim, c.heads, c.kv_heads, window, c.document_length)
        self.ffn_norm = RMSNorm(c.dim)
        self.ffn: SwiGLU | MoE = (MoE(c.dim, c.ffn_hidden, c.experts, c.top_k, c.capacity_factor, c.shared_experts)
                                  if moe else SwiGLU(c.dim, c.ffn_hidden))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        h = self.attn_norm(x)
        a = self.attn(h, rope)[0] if isinstance(self.attn, LatentAttention) else self.attn(h, rope)
        x = x + a
        return x + self.ffn(self.ffn_norm(x))


class Decoder(nn.Module):
    """Token embeddings -> pre-norm blocks -> RMSNorm -> output head (untied, as Llama's)."""

    def __init__(self, c: DecoderConfig) -> None:
        super().__init__()
        self.config = c
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.blocks = nn.ModuleList(Block(c, moe=c.experts > 0 and i >= c.dense_layers,
                                          window=c.sliding_window if i % 2 == 0 else 0) for i in range(c.layers))
        self.norm = RMSNorm(c.dim)
        self.head = nn.Linear(c.dim, c.vocab, bias=False)
        rope_width = c.rope_dim if c.kv_rank else c.dim // c.heads
        cos, sin = rope_tables(rope_width, c.max_length, c.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, std=c.init_std)
            elif isinstance(m, Experts):
                for w in (m.gate_proj, m.up_proj, m.down_proj):
                    nn.init.normal_(w, std=c.init_std)
        for block in self.blocks:  # GPT-2's scaling of the residual projections by depth
            nn.init.normal_(block.attn.o_proj.weight, std=c.init_std / math.sqrt(2 * c.layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (b, t) -> next-token logits (b, t, vocab)."""
        x = self.embed(tokens)
        rope = (self.rope_cos, self.rope_sin)
        for block in self.blocks:
            x = block(x, rope)
        return self.head(self.norm(x))

    def moe_layers(self) -> list[MoE]:
        return [b.ffn for b in self.blocks if isinstance(b.ffn, MoE)]

    def aux_loss(self) -> torch.Tensor:
        """The load-balancing losses of the last forward, summed over the MoE layers."""
        losses = [m.routing.aux_loss for m in self.moe_layers() if m.routing is not None]
        return torch.stack(losses).sum() if losses else torch.zeros(())

    def add_lora(self, rank: int, alpha: float) -> None:
        """Freeze every weight and add trainable adapters to the attention projections (q, k, v, o)."""
        for p in self.parameters():
            p.requires_grad_(False)
        for block in self.blocks:
            if not isinstance(block.attn, Attention):
                raise TypeError("LoRA adapters are defined for grouped-query attention only")
            block.attn.add_lora(rank, alpha)

    def parameter_names(self) -> list[str]:
        """Names logged as weights_initialization: the trainable tensors, in order."""
        return [n for n, p in self.named_parameters() if p.requires_grad]


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy (nats) of predicting tokens[:, 1:] from the logits at the positions before;
    ``mask`` (b, t) selects the predicted tokens that count (the LoRA task's summary)."""
    logp = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    if mask is None:
        return logp.mean()
    m = mask[:, 1:].flatten().to(logp.dtype)
    return (logp * m).sum() / m.sum()


def cosine_with_warmup(base_lr: float, end_lr: float, warmup: int, total: int) -> Callable[[int], float]:
    """The Llama 3.1 schedule: linear warm-up from 0 to ``base_lr`` over ``warmup`` steps, then a cosine
    decay to ``end_lr`` at step ``total``."""

    def lr_at(step: int) -> float:
        if step < warmup:
            return base_lr * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return end_lr + 0.5 * (base_lr - end_lr) * (1 + math.cos(math.pi * progress))

    return lr_at
