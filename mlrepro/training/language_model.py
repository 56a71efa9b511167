"""Decoder pretraining on the synthetic language (:mod:`mlrepro.datasets.synthetic_text`), shared by the
llama31, gpt_oss and deepseekv3 minis: the data files, AdamW with a linear warm-up and a cosine decay, the
gradient clip, the held-out log perplexity and the MLPerf hyperparameter keys of those benchmarks. Each
benchmark's ``model.py`` supplies its :class:`~mlrepro.training.decoder.Decoder` configuration and its own
extra keys.

Packed sequences (``data.document_length`` shorter than ``max_sequence_length``): each sequence is a pack of
documents of the language, as LLM pretraining packs its documents into its context length, and the model
attends within each document only (document masking, :func:`mlrepro.training.decoder.document_attention`).
The loss and the metric count the predictions within documents: the documents have no end-of-document
token, and the first word of a document cannot be predicted from the one before it, which it does not see.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.datasets import synthetic_text
from mlrepro.training.decoder import Decoder, DecoderConfig, cosine_with_warmup, next_token_loss
from mlrepro.training.epoch_order import epoch_generator
from mlrepro.training.lamb import decay_groups
from mlrepro.training.schedules import FunctionLR

SOURCE_FILE = "source.json"  # the language's floors on the held-out set, for the record (and the tests)
EVAL_TOKENS = 16384  # tokens per evaluation forward (512 sequences of 32)


def document_length(data: dict[str, Any]) -> int:
    """The words of a document: ``max_sequence_length`` (one per sequence) unless the sequences are packs."""
    return int(data.get("document_length", data["max_sequence_length"]))


def generate_text_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """train.npz and eval.npz (``train_samples`` and ``eval_samples`` sequences of ``max_sequence_length`` words,
    each a pack of documents of ``document_length`` words) from one source, and the source's floors."""
    d = params["data"]
    length, doc = d["max_sequence_length"], document_length(d)
    if length % doc:
        raise ValueError(f"data.max_sequence_length ({length}) must be a multiple of data.document_length ({doc})")
    rng = np.random.default_rng(seed)
    source = synthetic_text.make_source(rng, d["vocab_size"], d["branching"], d["concentration"])
    train = synthetic_text.sample(rng, source, d["train_samples"] * (length // doc), doc)
    evals = synthetic_text.sample(rng, source, d["eval_samples"] * (length // doc), doc)
    np.savez(out_dir / "train.npz", tokens=train.reshape(-1, length).astype(np.int16))
    np.savez(out_dir / "eval.npz", tokens=evals.reshape(-1, length).astype(np.int16))
    floors = {"eval_log_perplexity_floor": synthetic_text.bayes_log_perplexity(source, evals),
              "eval_first_order_floor": synthetic_text.first_order_log_perplexity(source, evals)}
    (out_dir / SOURCE_FILE).write_text(json.dumps(floors, indent=1, sort_keys=True) + "\n")


def read_floors(data_dir: Path) -> dict[str, float]:
    return json.loads((data_dir / SOURCE_FILE).read_text())


def decoder_config(params: dict[str, Any], **arch: Any) -> DecoderConfig:
    m, d = params["model"], params["data"]
    packed = document_length(d) < d["max_sequence_length"]
    return DecoderConfig(vocab=d["vocab_size"], max_length=d["max_sequence_length"],
                         document_length=document_length(d) if packed else 0, **m, **arch)


def epoch_batches(tokens: torch.Tensor, seed: int, epoch: int, steps: int, batch: int,
                  device: torch.device) -> Iterator[torch.Tensor]:
    """An epoch's ``steps`` batches of ``batch`` sequences, in the run's own order for that epoch (the decoder minis'
    pretraining and LoRA fine-tuning alike)."""
    order = torch.randperm(len(tokens), generator=epoch_generator(seed, epoch))
    shuffled = tokens[order].to(device)
    for i in range(steps):
        yield shuffled[i * batch : (i + 1) * batch]


class PretrainWorkload:
    """Next-token prediction on train.npz; the metric is the mean cross-entropy (nats) on eval.npz, the
    log perplexity of MLPerf's LLM benchmarks; lower is better."""

    higher_is_better = False

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int,
                 config: DecoderConfig) -> None:
        self.device, self.seed = device, seed
        self.tokens = torch.from_numpy(np.load(data_dir / "train.npz")["tokens"].astype(np.int64))
        self.eval_tokens = torch.from_numpy(np.load(data_dir / "eval.npz")["tokens"].astype(np.int64)).to(device)
        self.model = Decoder(config).to(device)
        self.document = document_length(params["data"])
        self.aux_loss_coeff = float(params.get("moe_aux_loss_coeff", 0.0))
        self.batch = params["batch_size"]
        self.steps_per_epoch = len(self.tokens) // self.batch  # whole batches only, as the reference's sampler
        self.max_steps = self.steps_per_epoch * params["max_epochs"]
        warmup = params["warmup_steps"]
        self.optimizer = torch.optim.AdamW(decay_groups(self.model.parameters()), lr=params["lr"],
                                           betas=(params["beta1"], params["beta2"]), eps=params["epsilon"],
                                           weight_decay=params["weight_decay"], foreach=True)
        self.scheduler = FunctionLR(self.optimizer, cosine_with_warmup(params["lr"], params["end_lr"], warmup,
                                                                       self.max_steps))
        self.grad_clip_norm = params["grad_clip_norm"]
        self.train_samples, self.eval_samples = len(self.tokens), len(self.eval_tokens)
        self.hyperparameters: dict[str, Any] = {
            "global_batch_size": self.batch,
            "max_sequence_length": self.tokens.shape[1],
            "opt_name": "adamw",
            "opt_base_learning_rate": params["lr"],
            "opt_end_learning_rate": params["end_lr"],
            "opt_learning_rate_warmup_steps": warmup,
            "opt_learning_rate_decay_steps": self.max_steps - warmup,
            "opt_learning_rate_decay_schedule": "cosine with linear warmup",
            "opt_adamw_beta_1": params["beta1"],
            "opt_adamw_beta_2": params["beta2"],
            "opt_adamw_epsilon": params["epsilon"],
            "opt_adamw_weight_decay": params["weight_decay"],
            "opt_gradient_clip_norm": self.grad_clip_norm,
            "max_steps": self.max_steps,
        }

    def initialized_tensors(self) -> list[str]:
        return self.model.parameter_names()

    def samples_count(self, epoch: int) -> int:
        """Training sequences seen by the end of ``epoch`` (the LLM rules' eval position)."""
        return epoch * self.steps_per_epoch * self.batch

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return epoch_batches(self.tokens, self.seed, epoch, self.steps_per_epoch, self.batch, self.device)

    def next_token_loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy of the predictions within the documents of ``tokens`` (b, t)."""
        logits = self.model(tokens)
        return next_token_loss(logits.view(-1, self.document, logits.shape[-1]), tokens.view(-1, self.document))

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        loss = self.next_token_loss(batch)
        if self.aux_loss_coeff:
            loss = loss + self.aux_loss_coeff * self.model.aux_loss()
        return loss

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        total, count = 0.0, 0
        rows = max(1, EVAL_TOKENS // self.eval_tokens.shape[1])
        for i in range(0, len(self.eval_tokens), rows):
            chunk = self.eval_tokens[i : i + rows]
            n = chunk.numel() // self.document * (self.document - 1)  # the predictions within documents
            total += self.next_token_loss(chunk).item() * n
            count += n
        return total / count
