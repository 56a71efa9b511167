"""Mini BERT: masked-language-model pre-training on a generated corpus, trained to an MLM-accuracy target.

The real benchmark pre-trains BERT-large (24 post-LN transformer layers) on Wikipedia with the
masked-language-model objective and stops when the masked-token accuracy on a fixed held-out set
reaches 0.720. This mini workload keeps that recipe and scales everything else down:

- the model is the same post-LN encoder (word + position embeddings, LayerNorm, blocks of
  multi-head self-attention and a GELU MLP, each followed by a residual LayerNorm) and the same
  MLM head (dense + GELU + LayerNorm, then a decoder tied to the word embeddings plus a bias), with
  a few layers of small width;
- the optimizer is LAMB with a linear warmup and a linear (poly power 1) decay, as in the reference;
- 15 % of the tokens are selected for prediction and, of those, 80 % become [MASK], 10 % a random
  word and 10 % stay unchanged; training masks are drawn afresh each epoch (dynamic masking) while
  the evaluation masks are fixed in the dataset, like the reference's held-out set;
- the corpus replaces Wikipedia by sequences from a hidden grammar: a sparse Markov chain in which
  every word has only a few possible successors, with unequal probabilities. A masked word is then
  predictable from its left *and* right neighbours together: a left-to-right model stays near 0.6
  accuracy, a bidirectional one can pass 0.9, so the target (the reference's 0.720) needs BERT's
  bidirectional attention.

Segment (token-type) embeddings, the pooler and the next-sentence-prediction head are left out:
they do not enter the benchmark's metric.
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

from mlrepro.training.epoch_order import epoch_generator
from mlrepro.training.lamb import Lamb, decay_groups

MASK = 0  # token id of [MASK]; the words are 1 .. vocab_size - 1
IGNORE = -100  # label of the positions that are not predicted (F.cross_entropy's ignore_index)


# ---------------------------------------------------------------------------------------- data
def _grammar(rng: np.random.Generator, words: int, branching: int) -> tuple[np.ndarray, np.ndarray]:
    """Every word's few possible successors and their probabilities: a sparse Markov chain."""
    succ = np.stack([rng.choice(words, size=branching, replace=False) for _ in range(words)])
    # Unequal weights, sorted, so that one successor is likelier than the others, as in language.
    prob = -np.sort(-rng.dirichlet(np.ones(branching), size=words), axis=1)
    return succ, prob


def _sequences(rng: np.random.Generator, succ: np.ndarray, prob: np.ndarray, n: int, length: int) -> np.ndarray:
    words, branching = succ.shape
    seq = np.empty((n, length), dtype=np.int64)
    seq[:, 0] = rng.integers(0, words, size=n)
    cum = np.cumsum(prob, axis=1)
    for i in range(1, length):
        prev = seq[:, i - 1]
        k = np.minimum((rng.random(n)[:, None] > cum[prev]).sum(1), branching - 1)  # inverse-CDF draw
        seq[:, i] = succ[prev, k]
    return seq + 1  # word w is token w + 1: token 0 is [MASK]


def mask_tokens(
    tokens: torch.Tensor, vocab_size: int, mask_prob: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: select ``mask_prob`` of the positions; of those 80 % -> [MASK], 10 % -> a
    random word, 10 % unchanged. Returns (inputs, labels) with labels IGNORE where not selected."""
    r = torch.rand(tokens.shape, generator=gen, device=tokens.device)
    selected = r < mask_prob
    # Reuse the same uniform draw to split the selected positions 80/10/10: no second stream needed.
    u = r / mask_prob
    to_mask = selected & (u < 0.8)
    to_random = selected & (u >= 0.8) & (u < 0.9)
    random_words = torch.randint(1, vocab_size, tokens.shape, generator=gen, device=tokens.device)
    inputs = torch.where(to_mask, torch.full_like(tokens, MASK), tokens)
    inputs = torch.where(to_random, random_words, inputs)
    labels = torch.where(selected, tokens, torch.full_like(tokens, IGNORE))
    return inputs, labels


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    succ, prob = _grammar(rng, d["vocab_size"] - 1, d["branching"])
    train = _sequences(rng, succ, prob, d["train_samples"], d["max_sequence_length"])
    evals = _sequences(rng, succ, prob, d["eval_samples"], d["max_sequence_length"])
    # The held-out masks are part of the dataset, so every run is scored on the same positions.
    gen = torch.Generator().manual_seed(seed)
    inputs, labels = mask_tokens(torch.from_numpy(evals), d["vocab_size"], d["mask_prob"], gen)
    np.savez(out_dir / "train.npz", tokens=train.astype(np.int16))
    np.savez(out_dir / "eval.npz", inputs=inputs.numpy().astype(np.int16), labels=labels.numpy().astype(np.int16))


# --------------------------------------------------------------------------------------- model
class Layer(nn.Module):
    """One post-LN encoder block, as in the original BERT: x = LN(x + attn(x)); x = LN(x + mlp(x))."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.out = nn.Linear(intermediate, hidden)
        self.out_ln = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:  # (b, t, h) -> (b, heads, t, h / heads)
            return y.view(b, t, self.heads, h // self.heads).transpose(1, 2)

        # No causal mask: every token attends to both sides, which is what makes BERT bidirectional.
        a = F.scaled_dot_product_attention(split(self.query(x)), split(self.key(x)), split(self.value(x)))
        x = self.attn_ln(x + self.attn_out(a.transpose(1, 2).reshape(b, t, h)))
        return self.out_ln(x + self.out(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(
        self, vocab: int, length: int, hidden: int, layers: int, heads: int, intermediate: int, init_std: float
    ) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(length, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, heads, intermediate) for _ in range(layers))
        self.head_dense = nn.Linear(hidden, hidden)
        self.head_ln = nn.LayerNorm(hidden, eps=1e-12)
        # The decoder reuses the word embeddings (weight tying); only its bias is its own.
        self.output_bias = nn.Parameter(torch.zeros(vocab))
        for m in self.modules():  # BERT's initializer: normal truncated at 2 std
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.trunc_normal_(m.weight, std=init_std, a=-2 * init_std, b=2 * init_std)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.emb_ln(self.word(tokens) + self.position(pos))
        for layer in self.layers:
            x = layer(x)
        x = self.head_ln(F.gelu(self.head_dense(x)))
        return x @ self.word.weight.T + self.output_bias

    def tf_names(self) -> list[str]:
        """The parameters under the reference's TensorFlow names (what the closed rules list)."""
        names = [
            "bert/embeddings/word_embeddings",
            "bert/embeddings/position_embeddings",
            "bert/embeddings/LayerNorm/gamma",
            "bert/embeddings/LayerNorm/beta",
        ]
        for i in range(len(self.layers)):
            p = f"bert/encoder/layer_{i}"
            for sub in ("attention/self/query", "attention/self/key", "attention/self/value",
                        "attention/output/dense", "intermediate/dense", "output/dense"):
                names += [f"{p}/{sub}/kernel", f"{p}/{sub}/bias"]
            for sub in ("attention/output/LayerNorm", "output/LayerNorm"):
                names += [f"{p}/{sub}/gamma", f"{p}/{sub}/beta"]
        return [*names, "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
                "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
                "cls/predictions/output_bias"]


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = True
    grad_clip_norm = None

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        self.p = params
        d = params["data"]
        self.vocab, self.mask_prob = d["vocab_size"], d["mask_prob"]
        train, evals = np.load(data_dir / "train.npz"), np.load(data_dir / "eval.npz")
        self.tokens = torch.from_numpy(train["tokens"].astype(np.int64))
        self.eval_inputs = torch.from_numpy(evals["inputs"].astype(np.int64)).to(device)
        self.eval_labels = torch.from_numpy(evals["labels"].astype(np.int64)).to(device)
        self.model = Bert(self.vocab, d["max_sequence_length"], params["hidden_size"], params["layers"],
                          params["heads"], params["intermediate_size"], params["init_std"]).to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.tokens) / self.batch)
        total = self.steps_per_epoch * params["max_epochs"]
        warmup = params["warmup_steps"]
        # The reference's LAMB (TF) applies the trust ratio to every tensor, the undecayed ones included.
        self.optimizer = Lamb(decay_groups(self.model.parameters()), lr=params["lr"],
                              betas=(params["beta1"], params["beta2"]), eps=params["epsilon"],
                              weight_decay=params["weight_decay"], adapt_undecayed=True)
        # The reference's schedule: linear warmup from 0, then linear decay to 0 at the last step.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(1, total - warmup))
        )
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "max_sequence_length": d["max_sequence_length"],
            "opt_name": "lamb",
            "opt_base_learning_rate": params["lr"],
            "opt_epsilon": params["epsilon"],
            "opt_lamb_epsilon": params["epsilon"],
            "opt_lamb_beta_1": params["beta1"],
            "opt_lamb_beta_2": params["beta2"],
            "opt_lamb_weight_decay_rate": params["weight_decay"],
            "opt_lamb_learning_rate_decay_poly_power": 1.0,
            "opt_learning_rate_warmup_steps": warmup,
            "opt_learning_rate_training_steps": total,
            "num_warmup_steps": warmup,
            "start_warmup_step": 0,
        }
        self.train_samples = len(self.tokens)
        self.eval_samples = len(self.eval_inputs)

    def initialized_tensors(self) -> list[str]:
        return self.model.tf_names()

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # Masks and order are drawn on the CPU so that a seed gives the same run on every device.
        gen = epoch_generator(self.seed, epoch)
        order = torch.randperm(len(self.tokens), generator=gen)
        inputs, labels = mask_tokens(self.tokens[order], self.vocab, self.mask_prob, gen)
        inputs, labels = inputs.to(self.device), labels.to(self.device)
        for i in range(self.steps_per_epoch):
            yield inputs[i * self.batch : (i + 1) * self.batch], labels[i * self.batch : (i + 1) * self.batch]

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(self.model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE)

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        correct = total = 0
        for i in range(0, len(self.eval_inputs), 512):
            y = self.eval_labels[i : i + 512]
            pred = self.model(self.eval_inputs[i : i + 512]).argmax(-1)
            correct += ((pred == y) & (y != IGNORE)).sum().item()
            total += (y != IGNORE).sum().item()
        return correct / total
