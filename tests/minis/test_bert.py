"""Unit tests of the mini BERT's own parts: the 80/10/10 masking, the corpus, the model's shapes (LAMB:
test_lamb.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir

bert = load_module("bert")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def defaults() -> dict[str, Any]:
    return yaml.safe_load((mini_dir("bert") / "defaults.yaml").read_text())


def test_masking_follows_the_80_10_10_rule() -> None:
    tokens = torch.randint(1, 32, (400, 100), generator=torch.Generator().manual_seed(0))
    inputs, labels = bert.mask_tokens(tokens, 32, 0.15, torch.Generator().manual_seed(1))
    selected = labels != bert.IGNORE
    assert selected.float().mean().item() == pytest.approx(0.15, abs=0.005)
    # Labels are the original tokens exactly at the selected positions; the rest is untouched.
    assert torch.equal(labels[selected], tokens[selected])
    assert torch.equal(inputs[~selected], tokens[~selected])
    n = selected.sum().item()
    masked = (inputs[selected] == bert.MASK).sum().item() / n
    kept = (inputs[selected] == tokens[selected]).sum().item() / n
    assert masked == pytest.approx(0.8, abs=0.015)
    # "Unchanged" is 10 %, plus the random replacements that happen to draw the same word (1/31 of 10 %).
    assert kept == pytest.approx(0.1 + 0.1 / 31, abs=0.01)
    assert 0.1 - 0.015 < 1 - masked - kept < 0.1 + 0.015  # random words
    assert (inputs >= 1).logical_or(inputs == bert.MASK).all() and (inputs < 32).all()


def test_masking_is_deterministic_in_the_generator() -> None:
    tokens = torch.randint(1, 32, (8, 16))
    a = bert.mask_tokens(tokens, 32, 0.15, torch.Generator().manual_seed(3))
    b = bert.mask_tokens(tokens, 32, 0.15, torch.Generator().manual_seed(3))
    c = bert.mask_tokens(tokens, 32, 0.15, torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


def test_corpus_follows_the_hidden_chain(tmp_path: Path) -> None:
    p = defaults()
    d = p["data"]
    bert.generate_data(tmp_path, p, seed=5)
    train = np.load(tmp_path / "train.npz")["tokens"].astype(np.int64)
    assert train.shape == (d["train_samples"], d["max_sequence_length"])
    assert train.min() >= 1 and train.max() < d["vocab_size"]  # token 0 is [MASK], never a word
    # Every word has at most `branching` distinct successors: the structure a model can learn.
    successors: dict[int, set[int]] = {}
    for a, b in zip(train[:, :-1].ravel(), train[:, 1:].ravel(), strict=True):
        successors.setdefault(int(a), set()).add(int(b))
    assert max(len(s) for s in successors.values()) <= d["branching"]
    ev = np.load(tmp_path / "eval.npz")
    labels = ev["labels"].astype(np.int64)
    assert ev["inputs"].shape == labels.shape == (d["eval_samples"], d["max_sequence_length"])
    assert 0.1 < (labels != bert.IGNORE).mean() < 0.2
    # Same seed, same bytes; another seed, another grammar.
    other = tmp_path / "again"
    other.mkdir()
    bert.generate_data(other, p, seed=5)
    assert np.array_equal(np.load(other / "train.npz")["tokens"], train)
    bert.generate_data(other, p, seed=6)
    assert not np.array_equal(np.load(other / "train.npz")["tokens"], train)


def test_model_shapes_tied_head_and_names() -> None:
    model = bert.Bert(vocab=20, length=12, hidden=16, layers=3, heads=4, intermediate=32, init_std=0.02)
    logits = model(torch.randint(0, 20, (5, 12)))
    assert logits.shape == (5, 12, 20)
    # The decoder is the word embedding matrix itself, not a copy.
    assert not any(n.startswith("decoder") for n, _ in model.named_parameters())
    names = model.tf_names()
    assert len(names) == len(set(names)) == len(list(model.parameters()))
    assert "bert/encoder/layer_2/attention/self/query/kernel" in names
    assert "bert/encoder/layer_3/attention/self/query/kernel" not in names


def test_attention_is_bidirectional() -> None:
    """A change at the last position reaches the first one: no causal mask."""
    torch.manual_seed(0)
    model = bert.Bert(vocab=20, length=8, hidden=16, layers=1, heads=2, intermediate=32, init_std=0.2).eval()
    x = torch.randint(1, 20, (1, 8))
    y = x.clone()
    y[0, -1] = (x[0, -1] % 19) + 1
    assert not torch.allclose(model(x)[0, 0], model(y)[0, 0])
