"""Mini Qwen3.5 397B GRPO: reinforcement learning with verifiable rewards (GRPO) of a decoder that the data step
trains by supervision, to a validation accuracy target.

The real benchmark starts from Qwen3.5-397B-A17B and trains it with NeMo-RL's GRPO on software tasks (R2E-Gym)
whose answers are verified by running their tests: per step, 16 rollouts of each of ``num_prompts_per_step``
prompts at temperature 1.0 / top-p 1.0, rewards from the verifier, group-relative advantages, the clipped
policy-gradient loss (one optimizer step per batch of rollouts, the ratio forced to 1, no KL term), AdamW at a
constant learning rate; from ``validation_start_samples`` on, after every step, the accuracy on 251 held-out
tasks sampled at temperature 0.1 / top-p 0.95 (4 rollouts each), until it exceeds 0.69. This mini keeps that
recipe (mlrepro.training.grpo):

- the tasks are additions of two numbers of two digits, ``a a + b b =``, whose answer is the sum's digits,
  lowest first, then the end token; a program verifies a completion by parsing it and comparing it with the
  sum that Python's integers compute (:func:`verify`), reward 1 or 0;
- the policy is the shared Llama-style decoder (mlrepro.training.decoder), whose base the data step trains by
  supervision on the training tasks' answers for a few steps only (``base.pt``, in the checksummed dataset, as
  the reference's data step brings the Qwen checkpoint): it answers some tasks and not others; GRPO raises
  its accuracy;
- the sequences may reach ``max_sequence_length`` (65536, the reference's) tokens: a completion ends at its
  end token, which the base emits after an answer, or there.

Left out: the 397B mixture of experts, the tokenizer, the software tasks, their sandboxes and agent turns,
asynchronous rollouts (trajectory age 1) and their truncated importance sampling, BF16.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.training import grpo
from mlrepro.training.decoder import Decoder, DecoderConfig
from mlrepro.training.schedules import FunctionLR

DIGITS = 10
PLUS, EQUALS, END = 10, 11, 12  # the tokens after the ten digits
VOCAB = 13
BASE = "base.pt"  # the supervised base's weights, made by the data step
TASKS = "tasks.npz"
SOURCE_FILE = "source.json"  # the base's own accuracy, for the record (and the tests)


# ---------------------------------------------------------------------------------------- tasks
def prompt_tokens(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, 6): a's two digits, +, b's two digits, = (numbers below 100, tens first)."""
    return np.stack([a // 10, a % 10, np.full_like(a, PLUS), b // 10, b % 10, np.full_like(a, EQUALS)], axis=1)


def answer_tokens(total: int) -> list[int]:
    """The sum's digits lowest first (no leading zeros: 0 is one digit), then the end token."""
    return [int(d) for d in reversed(str(total))] + [END]


def verify(prompt: list[int], completion: list[int]) -> float:
    """1.0 when the completion is the prompt's sum, digits lowest first, ended by the end token; else 0.0."""
    a, b = prompt[0] * 10 + prompt[1], prompt[3] * 10 + prompt[4]
    if not completion or completion[-1] != END or not 1 <= len(completion) - 1 <= 3:
        return 0.0
    digits = completion[:-1]
    if any(d >= DIGITS for d in digits) or (len(digits) > 1 and digits[-1] == 0):
        return 0.0
    return float(int("".join(str(d) for d in reversed(digits))) == a + b)


# The rules' validation sampling and the reference's sequence length, with which the data step measures the base.
RULES = {"validation_temperature": 0.1, "validation_top_p": 0.95, "validation_generations": 4,
         "max_sequence_length": 65536}


def policy_config(data: dict[str, Any], max_length: int) -> DecoderConfig:
    """The policy's architecture: the base's (data.base)."""
    m = data["base"]
    return DecoderConfig(vocab=VOCAB, dim=m["dim"], layers=m["layers"], heads=m["heads"], kv_heads=m["kv_heads"],
                         ffn_hidden=m["ffn_hidden"], rope_theta=m["rope_theta"], max_length=max_length)


def _supervised(prompts: np.ndarray, sums: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt + answer + end padding (n, 10), and the mask of the answer's tokens (the loss's)."""
    width = prompts.shape[1] + 4
    tokens = np.full((len(prompts), width), END, dtype=np.int64)
    mask = np.zeros_like(tokens, dtype=bool)
    tokens[:, : prompts.shape[1]] = prompts
    for i, total in enumerate(sums):
        answer = answer_tokens(int(total))
        tokens[i, prompts.shape[1] : prompts.shape[1] + len(answer)] = answer
        mask[i, prompts.shape[1] : prompts.shape[1] + len(answer)] = True
    return torch.from_numpy(tokens), torch.from_numpy(mask)


def train_base(prompts: np.ndarray, sums: np.ndarray, data: dict[str, Any], seed: int) -> tuple[Decoder, int]:
    """Supervised training of the base on the tasks' answers, deterministic in ``seed`` (one thread, own
    generators), stopped at the first check (every ``check_every`` steps) where its accuracy on ``dev_samples`` of
    the tasks, sampled as the rules validate, reaches ``stop_accuracy``: a base that knows the format and some of
    the sums. Such small decoders learn this task suddenly, after a number of steps that varies with the data, so
    the base is defined by what it can do, not by its steps."""
    b = data["base"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    dev = torch.from_numpy(prompts[: b["dev_samples"]].astype(np.int64))
    try:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            model = Decoder(policy_config(data, RULES["max_sequence_length"]))
            tokens, mask = _supervised(prompts[b["dev_samples"] :], sums[b["dev_samples"] :])
            opt = torch.optim.AdamW(model.parameters(), lr=b["lr"], betas=(0.9, 0.95), weight_decay=0.0)
            gen = torch.Generator().manual_seed(seed)
            for step in range(1, b["max_steps"] + 1):
                pick = torch.randint(len(tokens), (b["batch_size"],), generator=gen)
                logp = grpo.token_logprobs(model, tokens[pick])
                m = mask[pick][:, 1:].float()
                loss = -(logp * m).sum() / m.sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                if step % b["check_every"] == 0 and _accuracy(model, dev, seed) >= b["stop_accuracy"]:
                    break
    finally:
        torch.set_num_threads(threads)
    return model.eval(), step


def _accuracy(model: Decoder, prompts: torch.Tensor, seed: int) -> float:
    rollouts = grpo.sample(model, prompts, END, RULES["max_sequence_length"], RULES["validation_temperature"],
                           RULES["validation_top_p"], torch.Generator().manual_seed(seed))
    completions = rollouts.completions(prompts.shape[1])
    return float(np.mean([verify(p, c) for p, c in zip(prompts.tolist(), completions, strict=True)]))


def load_base(data_dir: Path, data: dict[str, Any], max_length: int) -> Decoder:
    model = Decoder(policy_config(data, max_length))
    model.load_state_dict(torch.load(data_dir / BASE, map_location="cpu", weights_only=True))
    return model


def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """The tasks (every pair of numbers below 100, ``eval_samples`` of them held out) -> tasks.npz; the base trained
    on the training tasks -> base.pt; the base's validation accuracy -> source.json."""
    d = params["data"]
    rng = np.random.default_rng(seed)
    pairs = rng.permutation(100 * 100)
    a, b = pairs // 100, pairs % 100
    prompts = prompt_tokens(a, b)
    held = d["eval_samples"]
    np.savez(out_dir / TASKS, train=prompts[held:].astype(np.int8), eval=prompts[:held].astype(np.int8))
    trained, steps = train_base(prompts[held:], (a + b)[held:], d, seed)
    torch.save(trained.state_dict(), out_dir / BASE)
    base = load_base(out_dir, d, RULES["max_sequence_length"]).eval()
    eval_prompts = torch.from_numpy(prompts[:held].astype(np.int64))
    accuracy = validation_accuracy(base, eval_prompts, RULES, torch.Generator().manual_seed(seed))
    record = {"base_validation_accuracy": accuracy, "base_steps": steps}
    (out_dir / SOURCE_FILE).write_text(json.dumps(record, indent=1) + "\n")


def rewards(prompts: torch.Tensor, rollouts: grpo.Rollouts) -> torch.Tensor:
    completions = rollouts.completions(prompts.shape[1])
    return torch.tensor([verify(p, c) for p, c in zip(prompts.tolist(), completions, strict=True)])


def validation_accuracy(model: Decoder, prompts: torch.Tensor, params: dict[str, Any], gen: torch.Generator) -> float:
    """The share of verified completions among ``validation_generations`` rollouts of each held-out prompt, sampled at
    the validation temperature and top-p."""
    g = params["validation_generations"]
    batch = prompts.repeat_interleave(g, dim=0)
    rollouts = grpo.sample(model, batch, END, params["max_sequence_length"], params["validation_temperature"],
                           params["validation_top_p"], gen)
    return float(rewards(batch, rollouts).mean())


def validation_start_steps(global_batch_size: int) -> int:
    """The steps before the first validation: ``validation_start_samples`` of closed_qwen35_397b_grpo.yaml
    (global_batch_size * ceil(2.5 + 3840 / global_batch_size)) in steps."""
    return math.ceil(2.5 + 3840 / global_batch_size)


# ------------------------------------------------------------------------------------ workload
class Workload:
    higher_is_better = True

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.params, self.device, self.seed = params, device, seed
        tasks = np.load(data_dir / TASKS)
        self.prompts = torch.from_numpy(tasks["train"].astype(np.int64))
        self.eval_prompts = torch.from_numpy(tasks["eval"].astype(np.int64)).to(device)
        self.model = load_base(data_dir, params["data"], params["max_sequence_length"]).to(device)
        self.per_step, self.group = params["num_prompts_per_step"], params["num_generations_per_prompt"]
        self.batch = self.per_step * self.group
        self.first = validation_start_steps(self.batch)  # the first epoch's steps; one step per epoch after
        self.max_steps = self.first + params["max_epochs"] - 1
        self.grad_clip_norm = params["grad_clip_norm"]
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=params["lr"], betas=(params["beta1"],
                                           params["beta2"]), eps=params["epsilon"], weight_decay=0.0, foreach=True)
        self.scheduler = FunctionLR(self.optimizer, lambda step: params["lr"])  # constant, no warm-up
        self.rollout_gen = torch.Generator(device=device).manual_seed(seed)
        self.order = torch.randperm(len(self.prompts), generator=torch.Generator().manual_seed(seed))
        self.steps_done = 0
        self.train_samples, self.eval_samples = len(self.prompts), len(self.eval_prompts)
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "max_sequence_length": params["max_sequence_length"],
            "init_checkpoint_step": 0,  # the RL starts from the base as the data step made it
            "max_steps": self.max_steps,
            "opt_name": "adamw",
            "opt_base_learning_rate": params["lr"],
            "opt_adamw_beta_1": params["beta1"],
            "opt_adamw_beta_2": params["beta2"],
            "opt_adamw_epsilon": params["epsilon"],
            "opt_adamw_weight_decay": 0.0,
            "opt_gradient_clip_norm": self.grad_clip_norm,
            "opt_learning_rate_warmup_steps": 0,
            "opt_learning_rate_decay_schedule": "constant",
            "generation_training_rollout_temperature": params["temperature"],
            "generation_training_rollout_top_p": params["top_p"],
            "generation_validation_rollout_temperature": params["validation_temperature"],
            "generation_validation_rollout_top_p": params["validation_top_p"],
            "num_prompts_per_step": self.per_step,
            "num_generations_per_prompt": self.group,
        }

    def initialized_tensors(self) -> list[str]:
        return self.model.parameter_names()  # loaded from the base, every one trained

    def samples_count(self, epoch: int) -> int:
        """Rollouts trained on by the end of ``epoch``: the first validation's, then one step's per epoch."""
        return (self.first + epoch - 1) * self.batch

    def _prompts(self, step: int) -> torch.Tensor:
        n = len(self.order)
        index = self.order[(torch.arange(self.per_step) + step * self.per_step) % n]
        return self.prompts[index].to(self.device)

    def batches(self, epoch: int) -> Iterator[tuple[grpo.Rollouts, torch.Tensor]]:
        """One batch of rollouts per step, sampled from the policy as it is after the step before (on-policy)."""
        for _ in range(self.first if epoch == 1 else 1):
            prompts = self._prompts(self.steps_done).repeat_interleave(self.group, dim=0)
            self.model.eval()
            rollouts = grpo.sample(self.model, prompts, END, self.params["max_sequence_length"],
                                   self.params["temperature"], self.params["top_p"], self.rollout_gen)
            self.model.train()
            self.steps_done += 1
            yield rollouts, grpo.group_advantages(rewards(prompts, rollouts), self.group).to(self.device)

    def loss(self, batch: tuple[grpo.Rollouts, torch.Tensor]) -> torch.Tensor:
        rollouts, advantages = batch
        logprobs = grpo.token_logprobs(self.model, rollouts.tokens)
        # force_on_policy_ratio: one optimizer step per batch of rollouts, the ratio's value is 1
        return grpo.clipped_pg_loss(logprobs, logprobs.detach(), advantages, rollouts.mask[:, 1:],
                                    self.params["ratio_clip_low"], self.params["ratio_clip_high"])

    @torch.no_grad()
    def evaluate(self, epoch: int) -> float:
        self.model.eval()
        gen = torch.Generator(device=self.device).manual_seed(self.seed * 1000 + epoch)
        return validation_accuracy(self.model, self.eval_prompts, self.params, gen)
