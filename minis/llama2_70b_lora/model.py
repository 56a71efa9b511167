"""Mini Llama 2 70B LoRA: low-rank adapters fine-tune a frozen pretrained decoder to summarize, trained to an
eval-loss target.

The real benchmark starts from the downloaded Llama 2 70B weights, freezes them, adds LoRA adapters
(rank 16, alpha 32) to the attention projections and fine-tunes them on GovReport (a government report and
its summary, the loss on the summary's tokens only) until the loss on the held-out summaries reaches 0.925.
This mini keeps that recipe:

- the base is a small Llama decoder (mlrepro.training.decoder: RMSNorm, RoPE, grouped-query attention,
  SwiGLU) pretrained by the data step on the generated language (mlrepro.datasets.synthetic_text), with
  documents separated by a separator word; its weights (base.pt) are part of the checksummed dataset, as
  the reference's data step downloads the model with the data (generate_data runs pretrain_base);
- the run freezes every base weight and trains only the adapters of q, k, v and o, with AdamW, a cosine
  decay and a gradient clip; the loss and the metric count the summary's tokens only;
- a document is a stretch of the language and its summary the document's lead (its first words, the Lead-k
  summary), each summary word replaced by a random one with a small probability. The base model continues
  the text after the separator as language, far above the target; the adapters must learn to look back at
  the document's start. The noise sets the floor (mlrepro.datasets.synthetic_text.noisy_copy_entropy).

Left out: the 70B size, the tokenizer, GovReport's 8192-token documents, LoRA dropout and FP8.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.datasets import synthetic_text
from mlrepro.training.decoder import Decoder, DecoderConfig, cosine_with_warmup, next_token_loss
from mlrepro.training.language_model import epoch_batches
from mlrepro.training.schedules import FunctionLR

BASE_DIR = "base"  # the dataset's folder of the base weights
BASE = "base.pt"  # the pretrained base's weights, made by the data step (pretrain_base)
SOURCE_FILE = "source.json"  # the task's floors and the base's own loss, for the record (and the tests)


# ---------------------------------------------------------------------------------------- data
def base_config(data: dict[str, Any]) -> DecoderConfig:
    b = data["base"]
    return DecoderConfig(vocab=data["vocab_size"] + 1, dim=b["dim"], layers=b["layers"], heads=b["heads"],
                         kv_heads=b["kv_heads"], ffn_hidden=b["ffn_hidden"], rope_theta=b["rope_theta"],
                         max_length=data["document_length"] + 1 + data["summary_length"])


def _with_separator(first: np.ndarray, second: np.ndarray, sep: int) -> np.ndarray:
    return np.concatenate([first, np.full((len(first), 1), sep), second], axis=1)


def summary_mask(tokens: torch.Tensor, document_length: int) -> torch.Tensor:
    """True at the summary's positions (after the document and its separator)."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, document_length + 1 :] = True
    return mask


def _train_base(texts: np.ndarray, config: DecoderConfig, b: dict[str, Any], seed: int) -> Decoder:
    """Next-token pretraining of the base on ``texts``, deterministic in ``seed`` (one thread, own generators)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = Decoder(config)
            tokens = torch.from_numpy(texts)
            steps = b["steps"]
            opt = torch.optim.AdamW(model.parameters(), lr=b["lr"], betas=(0.9, 0.95), weight_decay=0.1)
            sched = FunctionLR(opt, cosine_with_warmup(b["lr"], b["lr"] / 10, 8, steps))
            gen = torch.Generator().manual_seed(seed)
            for _ in range(steps):
                batch = tokens[torch.randint(len(tokens), (b["batch_size"],), generator=gen)]
                loss = next_token_loss(model(batch), batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def _language(params: dict[str, Any], seed: int) -> tuple[np.random.Generator, synthetic_text.Source]:
    d = params["data"]
    rng = np.random.default_rng(seed)
    return rng, synthetic_text.make_source(rng, d["vocab_size"], d["branching"], d["concentration"])


def pretrain_base(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """The data step's first part: pretrain the base -> out_dir/base.pt.

    Its corpus: documents of the language, each followed by the separator and either the start of another
    document or (a ``copy_share`` of them) a stretch of the same document from a random place, so that the
    base learns to continue text and to quote it, as a pretrained LLM does; never the lead in particular."""
    d = params["data"]
    _, source = _language(params, seed)
    rng = np.random.default_rng([seed, 1])  # the base's corpus: its own stream, the language's words
    n, length, s = d["base"]["samples"], d["document_length"], d["summary_length"]
    docs = synthetic_text.sample(rng, source, n, length)
    after = synthetic_text.sample(rng, source, n, s)
    quoted = rng.random(n) < d["base"]["copy_share"]
    start = rng.integers(1, length - s + 1, size=n)  # from anywhere but the start: the lead stays the task's
    spans = docs[np.arange(n)[:, None], start[:, None] + np.arange(s)]
    after[quoted] = spans[quoted]
    base = _train_base(_with_separator(docs, after, d["vocab_size"]), base_config(d), d["base"], seed)
    torch.save(base.state_dict(), out_dir / BASE)


def load_base(data_dir: Path, data: dict[str, Any]) -> Decoder:
    model = Decoder(base_config(data))
    model.load_state_dict(torch.load(data_dir / BASE_DIR / BASE, map_location="cpu", weights_only=True))
    return model.eval()


@torch.no_grad()
def summary_loss(model: Decoder, tokens: torch.Tensor, document_length: int) -> float:
    return next_token_loss(model(tokens), tokens, summary_mask(tokens, document_length)).item()


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """The base (base/base.pt), then the task: documents with their summaries -> task.npz; the floors and the
    base's own summary loss -> source.json."""
    d = params["data"]
    (out_dir / BASE_DIR).mkdir()
    pretrain_base(out_dir / BASE_DIR, params, seed)
    v, length, s = d["vocab_size"], d["document_length"], d["summary_length"]
    rng, source = _language(params, seed)
    tasks = {}
    for split in ("train", "eval"):
        docs = synthetic_text.sample(rng, source, d[f"{split}_samples"], length)
        tasks[split] = _with_separator(docs, synthetic_text.lead_summaries(rng, docs, s, v, d["noise"]), v)
    np.savez(out_dir / "task.npz", **{k: t.astype(np.int16) for k, t in tasks.items()})
    base = load_base(out_dir, d)
    floors = {"summary_loss_floor": synthetic_text.noisy_copy_entropy(v, d["noise"]),
              "base_summary_loss": summary_loss(base, torch.from_numpy(tasks["eval"].astype(np.int64)), length)}
    (out_dir / SOURCE_FILE).write_text(json.dumps(floors, indent=1, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = False

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        d = params["data"]
        self.document_length = d["document_length"]
        task = np.load(data_dir / "task.npz")
        self.tokens = torch.from_numpy(task["train"].astype(np.int64))
        self.eval_tokens = torch.from_numpy(task["eval"].astype(np.int64)).to(device)
        self.model = load_base(data_dir, d)
        self.model.add_lora(params["lora_rank"], params["lora_alpha"])
        self.model.to(device)
        self.batch = params["batch_size"]
        self.steps_per_epoch = len(self.tokens) // self.batch
        total = self.steps_per_epoch * params["max_epochs"]
        adapters = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(adapters, lr=params["lr"], betas=(params["beta1"], params["beta2"]),
                                           eps=params["epsilon"], weight_decay=params["weight_decay"], foreach=True)
        self.scheduler = FunctionLR(self.optimizer, cosine_with_warmup(params["lr"], 0.0, params["warmup_steps"],
                                                                       total))
        self.grad_clip_norm = params["grad_clip_norm"]
        self.train_samples, self.eval_samples = len(self.tokens), len(self.eval_tokens)
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "max_sequence_length": self.tokens.shape[1],
            "opt_name": "adamw",
            "opt_base_learning_rate": params["lr"],
            "opt_learning_rate_warmup_steps": params["warmup_steps"],
            "opt_learning_rate_training_steps": total,
            "opt_learning_rate_decay_schedule": "cosine with linear warmup",
            "opt_adamw_beta_1": params["beta1"],
            "opt_adamw_beta_2": params["beta2"],
            "opt_adamw_epsilon": params["epsilon"],
            "opt_adamw_weight_decay": params["weight_decay"],
            "opt_gradient_clip_norm": self.grad_clip_norm,
            "lora_rank": params["lora_rank"],
            "lora_alpha": params["lora_alpha"],
        }

    def initialized_tensors(self) -> list[str]:
        return self.model.parameter_names()  # the adapters: the base is loaded, not initialised

    def samples_count(self, epoch: int) -> int:
        """Training samples seen by the end of ``epoch`` (the rules' eval position)."""
        return epoch * self.steps_per_epoch * self.batch

    def batches(self, epoch: int) -> Iterator[torch.Tensor]:
        return epoch_batches(self.tokens, self.seed, epoch, self.steps_per_epoch, self.batch, self.device)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        return next_token_loss(self.model(batch), batch, summary_mask(batch, self.document_length))

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        value = summary_loss(self.model, self.eval_tokens, self.document_length)
        return value if math.isfinite(value) else float("inf")
