"""The training loop shared by every benchmark: seeding, the MLPerf log, the clock, the optimisation
step and stopping.

Run as ``python -m mlrepro.train ...``: one process per run, as mllog and the rules expect.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.core import atomic, rulesets
from mlrepro.core.minis import load_module
from mlrepro.datasets import manifest
from mlrepro.training import distributed
from mlrepro.training.mllog_writer import RunLog
from mlrepro.training.workload import Metric, Workload, reached


@dataclass
class Submission:
    org: str
    platform: str
    division: str = "open"
    status: str = "research"


@dataclass
class RunResult:
    benchmark: str
    seed: int
    status: str  # "success" or "aborted"
    epochs: int
    time_to_train_ms: int
    final_metric: Metric | None
    target: Metric
    higher_is_better: bool
    device: str
    threads: int
    metrics: list[dict[str, Any]] = field(default_factory=list)  # one {"epoch", "value", "time_ms"} per eval
    peak_rss_mb: float = 0.0


def submission_from_env() -> Submission:
    """The submission the run driver names in the environment (as NVIDIA's launchers pass it)."""
    env = os.environ
    return Submission(env.get("MLPERF_SUBMISSION_ORG", "mlrepro"), env.get("MLPERF_SUBMISSION_PLATFORM", "unknown"),
                      env.get("MLPERF_SUBMISSION_DIVISION", "open"), env.get("MLPERF_SUBMISSION_STATUS", "research"))


def seed_everything(seed: int) -> None:
    """Seed the global generators, which the layers' default initialisation draws from; everything the
    run draws after that comes from generators the workload seeds with the run's seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def train_epoch(workload: Workload, epoch: int) -> None:
    """One epoch of optimizer steps: the one step loop of every benchmark."""
    workload.model.train()
    # A data-parallel workload's batches are index tensors of the global batch: each rank takes its
    # share and the gradients are summed across ranks (a no-op in one process).
    data_parallel = getattr(workload, "data_parallel", False)
    for batch in workload.batches(epoch):
        share = 1.0
        if data_parallel:
            batch, share = distributed.shard(batch)
        loss = workload.loss(batch)
        workload.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if data_parallel:
            distributed.reduce_gradients(workload.model, share)
        if workload.grad_clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(workload.model.parameters(), workload.grad_clip_norm)
        workload.optimizer.step()
        workload.scheduler.step()


# The names the rules give the dtypes (common.yaml's lowest_numerical_precision_* lists).
PRECISION = {torch.float64: "fp64", torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bfloat16"}


def run_config(workload: Workload, params: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """What a run discloses of its precision, parallelism and config: mandatory from ruleset 6.1.0 (common.yaml),
    optional and checked the same way before, ignored by earlier checkers. Measured, not declared: the lowest
    floating dtype of the model's parameters (TF32 where CUDA's matmuls may use it), the gradients reduced in
    it across data-parallel ranks; no tensor, pipeline, context or expert parallelism (every rank holds the
    whole model); the micro-batch is the global batch's share of one rank and accumulation step. A workload's
    own hyperparameters win (one value per key)."""
    model = getattr(workload, "model", None)
    dtypes = [p.dtype for p in model.parameters() if p.is_floating_point()] if isinstance(model, torch.nn.Module) \
        else []
    lowest = min(dtypes, key=lambda d: torch.finfo(d).bits, default=torch.float32)
    precision = PRECISION.get(lowest, "fp32")
    if precision == "fp32" and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        precision = "tf32"
    disclosed: dict[str, Any] = {
        "lowest_numerical_precision_in_linear": precision, "lowest_numerical_precision_in_attn": precision,
        "lowest_numerical_precision_in_comm": PRECISION.get(lowest, "fp32"),
        "tensor_parallelism": 1, "pipeline_parallelism": 1, "context_parallelism": 1, "expert_parallelism": 1,
        "config_filename": f"config_{os.environ['DGXSYSTEM']}.sh" if os.environ.get("DGXSYSTEM") else "defaults.yaml",
    }
    batch = workload.hyperparameters.get("global_batch_size")
    if isinstance(batch, int):
        shares = distributed.current().world_size * int(params.get("gradient_accumulation_steps", 1))
        disclosed["micro_batch_size"] = max(1, batch // shares)
    return {k: v for k, v in disclosed.items() if k not in workload.hyperparameters}


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def drop_caches() -> bool:
    """Flush the page cache as the rules ask before each run; only root on a real host may."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def train(
    benchmark: str,
    data_dir: Path,
    params: dict[str, Any],
    seed: int,
    result_path: Path | None,
    submission: Submission,
    device: torch.device,
    threads: int,
    flush_caches: bool = False,
    checkpoint: Path | None = None,
) -> RunResult:
    module = load_module(benchmark)
    log = RunLog(result_path, enabled=distributed.current().is_main)
    c = log.c
    log.event(c.CACHE_CLEAR, value=drop_caches() if flush_caches else False)
    log.start(c.INIT_START)
    log.event(c.SUBMISSION_BENCHMARK, benchmark)
    log.event(c.SUBMISSION_ORG, submission.org)
    log.event(c.SUBMISSION_PLATFORM, submission.platform)
    log.event(c.SUBMISSION_DIVISION, submission.division)
    log.event(c.SUBMISSION_STATUS, submission.status)
    log.event(c.SEED, seed)

    manifest.require_valid(data_dir)
    seed_everything(seed)
    workload: Workload = module.Workload(data_dir, params, device, seed)
    # The metric's direction is the rules' (mlrepro/core/rulesets.yaml); a workload that says otherwise is wrong.
    if workload.higher_is_better != rulesets.rules(benchmark).higher_is_better:
        raise ValueError(f"minis/{benchmark}/model.py: higher_is_better={workload.higher_is_better}, but the "
                         f"rules' metric for {benchmark} is {'higher' if not workload.higher_is_better else 'lower'} "
                         "is better (mlrepro/core/rulesets.yaml)")
    for tensor in workload.initialized_tensors():
        log.event(c.WEIGHTS_INITIALIZATION, tensor=tensor)
    log.event(c.GRADIENT_ACCUMULATION_STEPS, int(params.get("gradient_accumulation_steps", 1)))
    for key, value in {**workload.hyperparameters, **run_config(workload, params, device)}.items():
        log.event(key, value)
    log.event(c.TRAIN_SAMPLES, workload.train_samples)
    log.event(c.EVAL_SAMPLES, workload.eval_samples)
    log.end(c.INIT_STOP)

    target: Metric = params["target"]
    max_epochs = int(params["max_epochs"])
    metrics: list[dict[str, Any]] = []
    status, value, epoch = "aborted", None, 0
    eval_keys = getattr(workload, "eval_keys", (c.EVAL_ACCURACY,))
    samples_count = getattr(workload, "samples_count", None)
    log.start(c.RUN_START)
    start = time.time()
    for epoch in range(1, max_epochs + 1):
        # Rounds from 3.1 on count progress in samples for some benchmarks (flux1, stable_diffusion)
        where = {"epoch_num": epoch} if samples_count is None else \
            {"epoch_num": epoch, "samples_count": samples_count(epoch)}
        log.start(c.EPOCH_START, epoch_num=epoch)
        train_epoch(workload, epoch)
        log.end(c.EPOCH_STOP, epoch_num=epoch)
        log.start(c.EVAL_START, **where)
        value = workload.evaluate(epoch)
        for key in eval_keys:
            log.event(key, value, **where)
        log.end(c.EVAL_STOP, **where)
        metrics.append({"epoch": epoch, "value": value, "time_ms": int((time.time() - start) * 1000)})
        if reached(value, target, workload.higher_is_better):
            status = "success"
            break
    log.end(c.RUN_STOP, status=status)
    elapsed_ms = int((time.time() - start) * 1000)
    model = getattr(workload, "model", None)
    if checkpoint is not None and status == "success" and isinstance(model, torch.nn.Module):
        with atomic.atomic_path(checkpoint) as tmp:  # the weights the inference stage serves
            torch.save(model.state_dict(), tmp)
    log.commit()
    return RunResult(
        benchmark=benchmark,
        seed=seed,
        status=status,
        epochs=epoch,
        time_to_train_ms=elapsed_ms,
        final_metric=value,
        target=target,
        higher_is_better=workload.higher_is_better,
        device=str(device),
        threads=threads,
        metrics=metrics,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mlrepro.train", description=__doc__)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--params", required=True, help="the benchmark's config as JSON")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--result", type=Path, default=None, help="the MLPerf log to write (default: stdout)")
    p.add_argument("--summary", type=Path, default=None, help="a JSON summary of the run")
    p.add_argument("--submission", default=None, help="JSON: org, platform, division, status "
                   "(default: $MLPERF_SUBMISSION_ORG, _PLATFORM, _DIVISION, _STATUS)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--drop-caches", action="store_true")
    p.add_argument("--checkpoint", type=Path, default=None, help="where a converged run saves its weights")
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    ctx = distributed.init(pick_device(args.device))
    result = train(
        args.benchmark,
        args.data_dir,
        json.loads(args.params),
        args.seed,
        args.result,
        Submission(**json.loads(args.submission)) if args.submission else submission_from_env(),
        pick_device(args.device),
        args.threads,
        args.drop_caches,
        args.checkpoint if ctx.is_main else None,
    )
    distributed.finish()
    if args.summary and ctx.is_main:  # the result is rank 0's
        atomic.write_json(args.summary, {**asdict(result), "world_size": ctx.world_size})


if __name__ == "__main__":
    main()
