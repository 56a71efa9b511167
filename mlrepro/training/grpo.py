"""Group Relative Policy Optimization (Shao et al. 2024), as NeMo-RL's GRPO trains the MLPerf qwen35_397b_grpo
reference: rollouts sampled from the policy, rewards from a verifier, advantages relative to each prompt's
group, and the clipped policy-gradient loss (``ClippedPGLossFn``).

- :func:`sample`: autoregressive completion of a batch of prompts at a temperature and top-p (nucleus
  sampling), until each completion ends with the end token or the sequence reaches ``max_length``;
- :func:`group_advantages`: each rollout's reward less its group's mean, divided by the group's standard
  deviation (0 where the group agrees: no signal);
- :func:`clipped_pg_loss`: ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` per completion token, averaged
  over every completion token of the batch (token-level loss). The reference sets ``force_on_policy_ratio``
  (one optimizer step per batch of rollouts, so the ratio r to the sampling policy is 1: its value is forced
  to 1 and its gradient is that of the log-probability) and skips the reference policy's log-probabilities
  (``reference_policy_kl_penalty`` 0): no KL term.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mlrepro.training.decoder import Decoder


@dataclass(frozen=True)
class Rollouts:
    """Completed sequences (b, t): prompt, completion, then the end token as padding; ``mask`` (b, t) is True at
    the completion's tokens (its end token included), the tokens the policy chose."""

    tokens: torch.Tensor
    mask: torch.Tensor

    def completions(self, prompt_length: int) -> list[list[int]]:
        return [row[prompt_length:][m[prompt_length:]].tolist() for row, m in zip(self.tokens, self.mask, strict=True)]


def nucleus(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The sampling distribution (n, vocab): softmax(logits / temperature) kept to the smallest set of tokens whose
    probability reaches ``top_p`` (all at 1.0), renormalised."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # the mass of the tokens ranked above each
    kept = torch.zeros_like(probs).scatter(-1, order, (before < top_p).to(probs.dtype))
    probs = probs * kept
    return probs / probs.sum(dim=-1, keepdim=True)


@torch.no_grad()
def sample(model: Decoder, prompts: torch.Tensor, end: int, max_length: int, temperature: float, top_p: float,
           generator: torch.Generator) -> Rollouts:
    """Complete each prompt (b, p) token by token until it emits ``end`` or reaches ``max_length`` tokens in all.
    Only the unfinished sequences are run at each position; the buffers grow as the longest completion does."""
    b, p = prompts.shape
    tokens, mask = prompts, torch.zeros_like(prompts, dtype=torch.bool)
    live = torch.arange(b, device=prompts.device)
    for t in range(p, max_length):
        if t == tokens.shape[1]:  # double the room, up to max_length
            room = min(t, max_length - t)
            tokens = torch.cat([tokens, tokens.new_full((b, room), end)], dim=1)
            mask = torch.cat([mask, mask.new_zeros((b, room))], dim=1)
        logits = model(tokens[live, :t])[:, -1]
        chosen = torch.multinomial(nucleus(logits.float(), temperature, top_p), 1, generator=generator).squeeze(1)
        tokens[live, t] = chosen
        mask[live, t] = True
        live = live[chosen != end]
        if live.numel() == 0:
            return Rollouts(tokens[:, : t + 1], mask[:, : t + 1])
    return Rollouts(tokens, mask)


def group_advantages(rewards: torch.Tensor, group: int, eps: float = 1e-6) -> torch.Tensor:
    """Rewards (n * group,) of ``group`` consecutive rollouts per prompt -> their group-relative advantages."""
    r = rewards.view(-1, group)
    std = r.std(dim=1, keepdim=True)
    return ((r - r.mean(dim=1, keepdim=True)) / (std + eps)).flatten()


def token_logprobs(model: Decoder, tokens: torch.Tensor) -> torch.Tensor:
    """log pi(token_t | tokens_<t) at positions 1.. (b, t - 1)."""
    logp = torch.log_softmax(model(tokens[:, :-1]).float(), dim=-1)
    return logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)


def clipped_pg_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                    clip_low: float, clip_high: float) -> torch.Tensor:
    """The clipped surrogate, token-level: ``logprobs``, ``old_logprobs`` and ``mask`` (b, t), ``advantages`` (b,)."""
    ratio = torch.exp(logprobs - old_logprobs)
    a = advantages.unsqueeze(1)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - clip_low, 1 + clip_high) * a)
    m = mask.to(surrogate.dtype)
    return -(surrogate * m).sum() / m.sum().clamp(min=1)
