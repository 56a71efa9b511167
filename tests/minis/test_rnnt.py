"""Unit tests of the mini RNN-T's own parts: the transducer loss, greedy decoding, WER, the data."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir

rnnt = load_module("rnnt")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def defaults() -> dict[str, Any]:
    return yaml.safe_load((mini_dir("rnnt") / "defaults.yaml").read_text())


def brute_force_log_likelihood(logp: torch.Tensor, labels: list[int], blank: int) -> float:
    """log P(labels) by enumerating every alignment: each is a placement of the labels among T blanks."""
    t_len, u_len = logp.shape[0], len(labels)
    total = []
    # An alignment is a sequence of T blanks and U labels ending with a blank; choose which of the
    # first T+U-1 moves are label emissions.
    for emit_at in itertools.combinations(range(t_len + u_len - 1), u_len):
        t = u = 0
        score = 0.0
        for move in range(t_len + u_len):
            if move in emit_at:
                score += float(logp[t, u, labels[u]])
                u += 1
            else:
                score += float(logp[t, u, blank])
                t += 1
        assert (t, u) == (t_len, u_len)
        total.append(score)
    return float(np.logaddexp.reduce(total))


def test_loss_equals_brute_force_on_t2_u1() -> None:
    # T=2, U=1: three alignments (y b b, b y b is not valid... enumerate by hand below).
    torch.manual_seed(0)
    logits = torch.randn(1, 2, 2, 3)
    logp = logits.log_softmax(-1)[0]
    labels = torch.tensor([[1]])
    blank = 2
    loss = rnnt.rnnt_loss(logits, labels, torch.tensor([2]), torch.tensor([1]), blank)
    # By hand: emit at t=0 then blank, blank; or blank at t=0, emit at t=1, blank.
    p1 = logp[0, 0, 1] + logp[0, 1, blank] + logp[1, 1, blank]
    p2 = logp[0, 0, blank] + logp[1, 0, 1] + logp[1, 1, blank]
    assert loss.item() == pytest.approx(-torch.logaddexp(p1, p2).item(), abs=1e-5)


def test_loss_equals_brute_force_in_a_padded_batch() -> None:
    """Larger lattices, with padding in time and labels that must not change the result."""
    torch.manual_seed(1)
    blank = 4
    logits = torch.randn(2, 5, 4, 5, dtype=torch.float64)
    labels = torch.tensor([[0, 3, 1], [2, 2, 0]])
    f_lengths, label_lengths = torch.tensor([5, 3]), torch.tensor([3, 2])
    loss = rnnt.rnnt_loss(logits, labels, f_lengths, label_lengths, blank)
    logp = logits.float().log_softmax(-1)
    expected = [
        brute_force_log_likelihood(logp[0], [0, 3, 1], blank),
        brute_force_log_likelihood(logp[1, :3, :3], [2, 2], blank),
    ]
    assert loss.item() == pytest.approx(-sum(expected) / 2, abs=1e-4)


def test_loss_gradient_is_finite_and_lowers_the_loss() -> None:
    torch.manual_seed(2)
    logits = torch.randn(3, 6, 3, 5, requires_grad=True)
    labels = torch.tensor([[1, 2], [0, 0], [3, 1]])
    args = (labels, torch.tensor([6, 4, 5]), torch.tensor([2, 1, 2]), 4)
    loss = rnnt.rnnt_loss(logits, *args)
    loss.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    with torch.no_grad():
        assert rnnt.rnnt_loss(logits - 0.5 * logits.grad, *args) < loss


def test_edit_distance_and_wer() -> None:
    assert rnnt.edit_distance([1, 2, 3], [1, 2, 3]) == 0
    assert rnnt.edit_distance([1, 2, 3], [1, 3]) == 1  # deletion
    assert rnnt.edit_distance([1, 2, 3], [1, 4, 2, 3]) == 1  # insertion
    assert rnnt.edit_distance([1, 2, 3], [3, 2, 1]) == 2  # two substitutions
    assert rnnt.edit_distance([], [5, 6]) == 2
    # Corpus WER: (0 + 1 + 2) edits over (2 + 2 + 1) reference words.
    refs, hyps = [[1, 2], [3, 4], [5]], [[1, 2], [3], [6, 7]]
    assert rnnt.word_error_rate(refs, hyps) == pytest.approx(3 / 5)


class _Scripted(torch.nn.Module):
    """A stand-in transducer whose joint output depends only on (frame, labels emitted so far)."""

    blank = 3

    def __init__(self, table: dict[tuple[int, int], int]) -> None:
        super().__init__()
        self.table = table  # (encoder frame, labels emitted) -> label to emit; otherwise blank

    def encode(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = x.shape[:2]
        return torch.arange(t, dtype=torch.float32).expand(b, t)[..., None], lengths

    def predict(self, labels: torch.Tensor, state: Any = None):
        count = torch.zeros(labels.shape[0], 1, 1) if state is None else state[0][0][:, :, None] + 1
        return count, (count[None, :, :, 0], count[None, :, :, 0])

    def joint(self, f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(f.shape[0], 4)
        for i in range(f.shape[0]):
            out[i, self.table.get((int(f[i, 0]), int(g[i, 0])), self.blank)] = 1.0
        return out


def test_greedy_decode_emits_several_labels_per_frame_and_respects_lengths() -> None:
    model = _Scripted({(0, 0): 2, (0, 1): 1, (2, 2): 0, (3, 3): 2})
    x = torch.zeros(2, 4, 1)
    hyps = rnnt.greedy_decode(model, x, torch.tensor([4, 3]), max_symbols=300)  # type: ignore[arg-type]
    # Frame 0 emits two labels, frame 2 one; frame 3 is past the second utterance's end.
    assert hyps == [[2, 1, 0, 2], [2, 1, 0]]
    assert rnnt.greedy_decode(model, x, torch.tensor([4, 4]), max_symbols=2) == [[2, 1], [2, 1]]  # type: ignore[arg-type]


def test_stack_frames_concatenates_neighbours_and_rounds_lengths_up() -> None:
    x = torch.arange(10, dtype=torch.float32).reshape(1, 5, 2)
    y, lengths = rnnt.stack_frames(x, torch.tensor([5]), 2)
    assert y.shape == (1, 3, 4)
    assert y[0, 0].tolist() == [0, 1, 2, 3]
    assert y[0, 2].tolist() == [8, 9, 0, 0]
    assert lengths.tolist() == [3]


def test_generated_data_is_deterministic_and_consistent(tmp_path: Path) -> None:
    params = defaults()
    params["data"].update(train_samples=16, eval_samples=8)
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        rnnt.generate_data(tmp_path / sub, params, seed=3)
    a, b = np.load(tmp_path / "a" / "train.npz"), np.load(tmp_path / "b" / "train.npz")
    for key in a.files:
        np.testing.assert_array_equal(a[key], b[key])
    lo, hi = params["data"]["words_per_utterance"]
    assert ((a["label_lengths"] >= lo) & (a["label_lengths"] <= hi)).all()
    assert (a["labels"] < params["data"]["words"]).all()
    for feats, n in zip(a["feats"], a["frames"], strict=True):
        assert not feats[n:].any()  # nothing but zeros after the utterance ends
    assert math.isclose(float(a["feats"][:, :, 0].std()), float(a["feats"][:, :, 0].std()))


def test_initialized_tensors_are_the_closed_rules_names(tmp_path: Path) -> None:
    params = defaults()
    params["data"].update(train_samples=8, eval_samples=4)
    rnnt.generate_data(tmp_path, params, seed=0)
    w = rnnt.Workload(tmp_path, params, torch.device("cpu"), seed=0)
    assert sorted(w.initialized_tensors()) == sorted(
        ["pre_rnn", "post_rnn", "pred_embed", "dec_rnn", "joint_pred", "joint_enc", "joint_net"]
    )
    assert w.higher_is_better is False
    assert w.evaluate(0) >= 0.0
