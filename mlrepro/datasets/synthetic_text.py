"""A small synthetic language for the decoder minis, with a known entropy so that perplexity targets mean something.

The language is a second-order Markov source over ``vocab`` words: after every pair of words only
``branching`` successors are possible, with unequal (Dirichlet-drawn) probabilities. Its log
perplexity has an exact floor: no model scores held-out text better than the source itself, whose
cross-entropy on the held-out set is computed here (:func:`bayes_log_perplexity`). Looking at one
previous word only leaves a far higher floor (:func:`first_order_log_perplexity`), so a target between
the two needs a model that combines two positions: attention, with the positions told apart (RoPE).

Documents and their summaries (the LoRA task) are built on the same language: a document is a stretch
of text, its summary the document's lead (its first words, the classic Lead-k summary), each summary
word replaced by a random word with a small probability, which sets the summary loss's own floor
(:func:`noisy_copy_entropy`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Source:
    vocab: int
    successors: np.ndarray  # (vocab * vocab, branching): the possible next words after the pair (a, b) at a*vocab+b
    probs: np.ndarray  # (vocab * vocab, branching): their probabilities, each row sorted, largest first

    def table(self) -> np.ndarray:
        """P(next | a, b) as a dense (vocab * vocab, vocab) matrix."""
        dense = np.zeros((self.vocab * self.vocab, self.vocab))
        np.put_along_axis(dense, self.successors, self.probs, axis=1)
        return dense


def make_source(rng: np.random.Generator, vocab: int, branching: int, concentration: float) -> Source:
    succ = np.stack([rng.choice(vocab, size=branching, replace=False) for _ in range(vocab * vocab)])
    prob = -np.sort(-rng.dirichlet(np.full(branching, concentration), size=vocab * vocab), axis=1)
    return Source(vocab, succ, prob)


def pair_distribution(source: Source, iterations: int = 500) -> np.ndarray:
    """The stationary distribution of consecutive pairs (a, b), as a (vocab, vocab) matrix (power iteration)."""
    v = source.vocab
    table = source.table().reshape(v, v, v)  # [a, b, c] = P(c | a, b)
    pi = np.full((v, v), 1.0 / (v * v))
    for _ in range(iterations):
        pi = np.einsum("ab,abc->bc", pi, table)
    return pi / pi.sum()


def sample(rng: np.random.Generator, source: Source, n: int, length: int, burn_in: int = 16) -> np.ndarray:
    """``n`` texts of ``length`` words, each started ``burn_in`` words early so that it begins in the
    stationary regime (then the first word's successor follows the stationary pair distribution)."""
    v, branching = source.vocab, source.successors.shape[1]
    total = length + burn_in
    seq = np.empty((n, total), dtype=np.int64)
    seq[:, :2] = rng.integers(0, v, size=(n, 2))
    cum = np.cumsum(source.probs, axis=1)
    for i in range(2, total):
        ctx = seq[:, i - 2] * v + seq[:, i - 1]
        k = np.minimum((rng.random(n)[:, None] > cum[ctx]).sum(1), branching - 1)  # inverse-CDF draw
        seq[:, i] = source.successors[ctx, k]
    return seq[:, burn_in:]


def bayes_log_perplexity(source: Source, texts: np.ndarray) -> float:
    """The source's own mean cross-entropy (nats) of predicting words 1.. of each text from the words before:
    the floor of any model's log perplexity on ``texts``."""
    v = source.vocab
    pi = pair_distribution(source)
    first = pi / pi.sum(1, keepdims=True)  # P(b | a) in the stationary regime: the second word from the first only
    nll = -np.log(first[texts[:, 0], texts[:, 1]]).sum()
    table = source.table()
    ctx = texts[:, :-2] * v + texts[:, 1:-1]
    nll += -np.log(table[ctx, texts[:, 2:]]).sum()
    return float(nll / (texts.shape[0] * (texts.shape[1] - 1)))


def first_order_log_perplexity(source: Source, texts: np.ndarray) -> float:
    """The floor of a model that sees only the previous word (a bigram model): the bar a target must be under."""
    pi = pair_distribution(source)
    v = source.vocab
    table = source.table().reshape(v, v, v)
    # P(c | b) = sum_a P(a, b) P(c | a, b) / P(b)
    joint = np.einsum("ab,abc->bc", pi, table)
    bigram = joint / joint.sum(1, keepdims=True)
    nll = -np.log(bigram[texts[:, :-1], texts[:, 1:]]).sum()
    return float(nll / (texts.shape[0] * (texts.shape[1] - 1)))


def noisy_copy_entropy(vocab: int, noise: float) -> float:
    """Entropy (nats) of a word that is the copied one with probability 1 - noise and otherwise uniform over
    ``vocab`` words: the floor of the summary loss."""
    hit = 1 - noise + noise / vocab
    miss = noise / vocab
    return -hit * math.log(hit) - (vocab - 1) * miss * math.log(miss) if noise > 0 else 0.0


def lead_summaries(rng: np.random.Generator, documents: np.ndarray, length: int, vocab: int,
                   noise: float) -> np.ndarray:
    """Each document's lead (its first ``length`` words), each word replaced by a uniform random word with
    probability ``noise``."""
    lead = documents[:, :length].copy()
    flip = rng.random(lead.shape) < noise
    lead[flip] = rng.integers(0, vocab, size=int(flip.sum()))
    return lead
