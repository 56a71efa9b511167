"""Mini RNN-T: speech recognition on generated "audio" features, trained to a word-error-rate target.

The real benchmark trains a recurrent neural network transducer on LibriSpeech log-mel frames. This
mini workload keeps every part of that recipe at toy size:

- the data are feature frames (``features`` bins, each standing for a 10 ms hop) of utterances of
  2-4 words from a small vocabulary. Each word is a sequence of "phones" drawn from a shared
  inventory, and each phone is a fixed spectral profile held for a random number of frames, so a
  word's sound is a pattern in time that varies in speed and is buried in noise. Phones are shared
  between words, so the network must use temporal context, not a single frame, to tell words apart;
- the encoder stacks input frames (the reference's frame splicing), runs ``pre_rnn``, stacks pairs of
  its outputs (the time reduction) and runs ``post_rnn``; the prediction network (``pred_embed``,
  ``dec_rnn``) reads the labels emitted so far; the joint network adds the two projections
  (``joint_enc``, ``joint_pred``) and maps them through ReLU and a linear layer (``joint_net``) to
  the vocabulary plus blank. The module names are the ones the closed rules list;
- the loss is the RNN-T loss, written here in plain torch: the forward algorithm over the T x U
  alignment lattice in log space, with autograd for the gradient;
- training uses LAMB with the reference's schedule (linear warmup, hold, exponential decay to a
  floor), gradient clipping, speed perturbation and SpecAugment; evaluation decodes greedily and
  scores word error rate (WER, lower is better), the metric the reference targets.

The targets are word tokens rather than characters: at this size characters would only add label
length, not a different kind of problem.
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
from mlrepro.training.lamb import Lamb, decay_groups
from mlrepro.training.schedules import FunctionLR

FRAME_SECONDS = 0.01  # every generated frame stands for one 10 ms hop, as in the reference's features
MAX_SYMBOLS_PER_STEP = 4  # greedy decoding may emit at most this many labels per encoder frame


# ---------------------------------------------------------------------------------------- data
def _lexicon(rng: np.random.Generator, words: int, phones: int, phones_per_word: int) -> np.ndarray:
    """Each word is a distinct sequence of phones from the shared inventory."""
    lexicon: list[tuple[int, ...]] = []
    while len(lexicon) < words:
        w = tuple(int(p) for p in rng.integers(0, phones, size=phones_per_word))
        if w not in lexicon:
            lexicon.append(w)
    return np.array(lexicon, dtype=np.int64)


def _utterances(
    rng: np.random.Generator, d: dict[str, Any], lexicon: np.ndarray, profiles: np.ndarray, n: int
) -> dict[str, np.ndarray]:
    lo_w, hi_w = d["words_per_utterance"]
    lo_f, hi_f = d["phone_frames"]
    max_gap = d["max_gap_frames"]
    max_words = hi_w
    # The longest possible utterance sets the padded width of the stored arrays.
    max_t = max_gap + max_words * (lexicon.shape[1] * hi_f + max_gap)
    feats = np.zeros((n, max_t, d["features"]), dtype=np.float32)
    frames = np.zeros(n, dtype=np.int64)
    labels = np.zeros((n, max_words), dtype=np.int64)
    label_lengths = np.zeros(n, dtype=np.int64)
    for i in range(n):
        words = rng.integers(0, len(lexicon), size=rng.integers(lo_w, hi_w + 1))
        t = int(rng.integers(0, max_gap + 1))  # leading silence
        for w in words:
            for phone in lexicon[w]:
                dur = int(rng.integers(lo_f, hi_f + 1))
                feats[i, t : t + dur] = profiles[phone] * rng.uniform(0.7, 1.3)  # loudness varies
                t += dur
            t += int(rng.integers(0, max_gap + 1))  # pause after the word (possibly none)
        feats[i, :t] += d["noise"] * rng.standard_normal((t, d["features"]), dtype=np.float32)
        frames[i], labels[i, : len(words)], label_lengths[i] = t, words, len(words)
    return {"feats": feats, "frames": frames, "labels": labels, "label_lengths": label_lengths}


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    d = params["data"]
    rng = np.random.default_rng(seed)
    lexicon = _lexicon(rng, d["words"], d["phones"], d["phones_per_word"])
    profiles = rng.standard_normal((d["phones"], d["features"])).astype(np.float32)
    for split, n in (("train", d["train_samples"]), ("eval", d["eval_samples"])):
        np.savez(out_dir / f"{split}.npz", **_utterances(rng, d, lexicon, profiles, n))


# --------------------------------------------------------------------------------------- model
def stack_frames(x: torch.Tensor, lengths: torch.Tensor, factor: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate each run of ``factor`` frames into one: shorter sequences, wider frames."""
    b, t, f = x.shape
    pad = (-t) % factor
    x = F.pad(x, (0, 0, 0, pad))
    return x.reshape(b, (t + pad) // factor, f * factor), (lengths + factor - 1) // factor


class RNNT(nn.Module):
    def __init__(self, features: int, vocab: int, p: dict[str, Any]) -> None:
        super().__init__()
        self.blank = vocab  # the reference puts blank last, after the real labels
        self.splice, self.reduction = p["frame_splicing"], p["time_reduction"]
        enc, pred, joint = p["encoder_hidden"], p["pred_hidden"], p["joint_hidden"]
        self.pre_rnn = nn.LSTM(features * self.splice, enc, batch_first=True)
        self.post_rnn = nn.LSTM(enc * self.reduction, enc, batch_first=True)
        # Index ``vocab`` (the blank) doubles as the start symbol the prediction network first reads.
        self.pred_embed = nn.Embedding(vocab + 1, pred)
        self.dec_rnn = nn.LSTM(pred, pred, batch_first=True)
        self.joint_enc = nn.Linear(enc, joint)
        self.joint_pred = nn.Linear(pred, joint)
        self.joint_net = nn.Sequential(nn.ReLU(), nn.Linear(joint, vocab + 1))
        for lstm in (self.pre_rnn, self.post_rnn, self.dec_rnn):
            # The reference scales the LSTM's default init down and opens the forget gate, so the
            # recurrent state neither explodes nor forgets at the start of training.
            for name, w in lstm.named_parameters():
                w.data.mul_(p["weights_init_scale"])
                if name.startswith("bias_ih"):
                    w.data[lstm.hidden_size : 2 * lstm.hidden_size] = 1.0
                elif name.startswith("bias_hh"):
                    w.data[lstm.hidden_size : 2 * lstm.hidden_size] = 0.0

    def encode(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = stack_frames(x, lengths, self.splice)
        x, _ = self.pre_rnn(x)
        x, lengths = stack_frames(x, lengths, self.reduction)
        x, _ = self.post_rnn(x)
        return x, lengths

    def predict(self, labels: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        g, state = self.dec_rnn(self.pred_embed(labels), state)
        return g, state

    def joint(self, f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self.joint_net(self.joint_enc(f) + self.joint_pred(g))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor):
        """Logits over the whole lattice: (batch, encoder frames, labels + 1, vocab + 1)."""
        f, f_lengths = self.encode(x, lengths)
        start = torch.full_like(labels[:, :1], self.blank)
        g, _ = self.predict(torch.cat([start, labels], dim=1))
        return self.joint(f.unsqueeze(2), g.unsqueeze(1)), f_lengths


def rnnt_loss(
    logits: torch.Tensor, labels: torch.Tensor, f_lengths: torch.Tensor, label_lengths: torch.Tensor,
    blank: int,
) -> torch.Tensor:
    """Mean over the batch of -log P(labels | audio), summed over every alignment.

    An alignment is a path through the (t, u) lattice from (0, 0): a blank moves to the next frame,
    emitting label u+1 moves to the next label on the same frame, and the path ends with a blank
    out of (T-1, U). alpha[t, u], the log probability of all paths reaching (t, u), obeys

        alpha[t, u] = logaddexp(alpha[t-1, u] + blank[t-1, u], alpha[t, u-1] + emit[t, u-1]).

    Along one lattice column u this is a linear recurrence in log space, which unrolls to
        alpha[t, u] = B[t] + logcumsumexp_k(c[k] - B[k]),  B[t] = sum_{j<t} blank[j, u],
        c[k] = alpha[k, u-1] + emit[k, u-1],
    so the loop runs over the few labels and each step is vectorised over time and batch.
    Padding past an utterance's length never reaches its end point, since paths only move forward.
    """
    logp = logits.float().log_softmax(dim=-1)
    b, t, u1, _ = logp.shape
    lp_blank = logp[..., blank]  # (B, T, U+1)
    lp_emit = logp[:, :, :-1].gather(3, labels[:, None, :, None].expand(b, t, u1 - 1, 1)).squeeze(3)
    # Exclusive cumulative sums of blanks along time: B[t] for every column u at once.
    blank_cum = torch.cumsum(lp_blank, dim=1) - lp_blank
    alphas = [blank_cum[:, :, 0]]  # column 0: only blanks lead there
    for u in range(1, u1):
        c = alphas[-1] + lp_emit[:, :, u - 1]
        alphas.append(blank_cum[:, :, u] + torch.logcumsumexp(c - blank_cum[:, :, u], dim=1))
    alpha = torch.stack(alphas, dim=2)  # (B, T, U+1)
    rows = torch.arange(b, device=logits.device)
    last_t = f_lengths - 1
    log_likelihood = alpha[rows, last_t, label_lengths] + lp_blank[rows, last_t, label_lengths]
    return -log_likelihood.mean()


@torch.no_grad()
def greedy_decode(model: RNNT, x: torch.Tensor, lengths: torch.Tensor, max_symbols: int) -> list[list[int]]:
    """At each encoder frame emit the most likely label until blank wins (batched in lock step)."""
    f, f_lengths = model.encode(x, lengths)
    b = f.shape[0]
    last = torch.full((b, 1), model.blank, dtype=torch.long, device=f.device)
    g, state = model.predict(last)
    emitted = torch.zeros(b, dtype=torch.long, device=f.device)
    hyps: list[list[int]] = [[] for _ in range(b)]
    for t in range(f.shape[1]):
        for _ in range(MAX_SYMBOLS_PER_STEP):
            k = model.joint(f[:, t], g[:, 0]).argmax(dim=-1)
            emit = (k != model.blank) & (t < f_lengths) & (emitted < max_symbols)
            if not emit.any():
                break
            # Only the utterances that emitted advance their prediction network.
            g_new, (h_new, c_new) = model.predict(k[:, None], state)
            m = emit[:, None]
            g = torch.where(m[:, :, None], g_new, g)
            state = (torch.where(m[None], h_new, state[0]), torch.where(m[None], c_new, state[1]))
            emitted += emit.long()
            for i in emit.nonzero().flatten().tolist():
                hyps[i].append(int(k[i]))
    return hyps


def edit_distance(ref: list[int], hyp: list[int]) -> int:
    """Levenshtein distance: substitutions, deletions and insertions, each costing one."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev_diag, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev_diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev_diag + (r != h))
    return row[-1]


def word_error_rate(refs: list[list[int]], hyps: list[list[int]]) -> float:
    """Total word edits over total reference words (the corpus-level WER the reference reports)."""
    return sum(edit_distance(r, h) for r, h in zip(refs, hyps, strict=True)) / sum(len(r) for r in refs)


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = False  # WER

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        self.p = params
        train, evals = np.load(data_dir / "train.npz"), np.load(data_dir / "eval.npz")
        self.trainset = {k: torch.from_numpy(train[k]).to(device) for k in train.files}
        self.held_out = {k: torch.from_numpy(evals[k]).to(device) for k in evals.files}
        self.eval_refs = [
            row[:n].tolist() for row, n in zip(evals["labels"], evals["label_lengths"], strict=True)
        ]
        d = params["data"]
        self.model = RNNT(d["features"], d["words"], params).to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = math.ceil(len(self.trainset["frames"]) / self.batch)
        # apex's FusedLAMB (the reference's) applies the trust ratio only where weight decay does: the
        # biases take plain Adam steps, so they are not stuck at their tiny initial norm.
        self.optimizer = Lamb(decay_groups(self.model.parameters()), lr=params["lr"],
                              betas=(params["beta1"], params["beta2"]), eps=params["epsilon"],
                              weight_decay=params["weight_decay"], adapt_undecayed=False)
        self.scheduler = FunctionLR(self.optimizer, self._lr)
        self.grad_clip_norm = params["grad_clip_norm"]
        aug = params["augment"]
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "opt_name": "lamb",
            "opt_base_learning_rate": params["lr"],
            "opt_lamb_epsilon": params["epsilon"],
            # The reference logs its exponential decay factor under this key.
            "opt_lamb_learning_rate_decay_poly_power": params["lr_exp_gamma"],
            "opt_learning_rate_warmup_epochs": params["warmup_epochs"],
            "opt_lamb_learning_rate_hold_epochs": params["hold_epochs"],
            "opt_weight_decay": params["weight_decay"],
            "opt_lamb_beta_1": params["beta1"],
            "opt_lamb_beta_2": params["beta2"],
            "opt_gradient_clip_norm": params["grad_clip_norm"],
            # Warmup (step+1)/(warmup+1) and exponential decay, not BERT's polynomial: the reference's
            # "alternative" functions, logged as True as the reference does.
            "opt_learning_rate_alt_decay_func": True,
            "opt_learning_rate_alt_warmup_func": True,
            "opt_lamb_learning_rate_min": params["min_lr"],
            "data_train_max_duration": float(train["frames"].max()) * FRAME_SECONDS,
            "data_train_num_buckets": 1,  # batches are drawn uniformly, not bucketed by length
            "data_speed_perturbaton_min": aug["speed_min"],
            "data_speed_perturbaton_max": aug["speed_max"],
            "data_spec_augment_freq_n": aug["freq_masks"],
            "data_spec_augment_freq_min": 0,
            "data_spec_augment_freq_max": aug["freq_max"],
            "data_spec_augment_time_n": aug["time_masks"],
            "data_spec_augment_time_min": 0,
            "data_spec_augment_time_max": aug["time_max"],
            "model_weights_initialization_scale": params["weights_init_scale"],
            "model_eval_ema_factor": 0.0,  # evaluation uses the trained weights as they are
            "eval_max_prediction_symbols": params["eval_max_symbols"],
        }
        self.train_samples = len(self.trainset["frames"])
        self.eval_samples = len(self.held_out["frames"])

    def initialized_tensors(self) -> list[str]:
        return [name for name, _ in self.model.named_children()]

    def _lr(self, step: int) -> float:
        """The reference's lr_policy: linear warmup, hold, then exponential decay per epoch."""
        p = self.p
        warmup, hold = p["warmup_epochs"] * self.steps_per_epoch, p["hold_epochs"] * self.steps_per_epoch
        epoch = step // self.steps_per_epoch + 1
        if step < warmup:
            a = (step + 1) / (warmup + 1)
        elif step < warmup + hold:
            a = 1.0
        else:
            a = p["lr_exp_gamma"] ** (epoch - 1 - p["warmup_epochs"] - p["hold_epochs"])
        return max(a * p["lr"], p["min_lr"])

    def _augment(self, x: torch.Tensor, lengths: torch.Tensor, gen: torch.Generator):
        """Speed perturbation (resample the time axis) and SpecAugment (mask bands and spans)."""
        aug = self.p["augment"]
        speed = aug["speed_min"] + (aug["speed_max"] - aug["speed_min"]) * torch.rand(1, generator=gen).item()
        new_t = max(1, round(x.shape[1] / speed))
        x = F.interpolate(x.transpose(1, 2), size=new_t, mode="linear", align_corners=False).transpose(1, 2)
        lengths = torch.clamp((lengths.float() / speed).round().long(), 1, new_t)
        b, t, f = x.shape

        def masks(n: int, width_max: torch.Tensor, size: int) -> torch.Tensor:
            # n spans per utterance with width uniform in [0, width_max], start uniform: (B, size) bool.
            width = (torch.rand(b, n, generator=gen) * (width_max.view(-1, 1) + 1)).long()
            start = (torch.rand(b, n, generator=gen) * (size - width + 1)).long()
            pos = torch.arange(size)
            hit = (pos >= start[..., None]) & (pos < (start + width)[..., None])
            return hit.any(dim=1).to(x.device)

        freq = masks(aug["freq_masks"], torch.full((b,), aug["freq_max"]), f)
        # Time masks are at most a fraction of each utterance's length, as in the reference.
        time = masks(aug["time_masks"], (lengths.cpu() * aug["time_max"]).floor(), t)
        x = x.masked_fill(freq[:, None, :] | time[:, :, None], 0.0)
        return x, lengths

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, ...]]:
        gen = epoch_generator(self.seed, epoch)
        tr = self.trainset
        for idx in shuffled_batches(self.train_samples, self.batch, gen, self.device):
            # Trim padding to the longest utterance (and label) in this batch.
            frames, label_lengths = tr["frames"][idx], tr["label_lengths"][idx]
            t_max, u_max = int(frames.max()), int(label_lengths.max())
            x, lengths = self._augment(tr["feats"][idx, :t_max], frames, gen)
            yield x, lengths, tr["labels"][idx, :u_max], label_lengths

    def loss(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, lengths, labels, label_lengths = batch
        logits, f_lengths = self.model(x, lengths, labels)
        return rnnt_loss(logits, labels, f_lengths, label_lengths, self.model.blank)

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        ev = self.held_out
        hyps = greedy_decode(self.model, ev["feats"], ev["frames"], self.p["eval_max_symbols"])
        return word_error_rate(self.eval_refs, hyps)
