"""Process-group set-up for a run that spans processes: data-parallel training, one rank per process.

The launcher (:mod:`mlrepro.slurm.launch`) starts the processes with ``srun`` inside a Slurm allocation or
with ``torchrun`` elsewhere; each process finds its rank here, from torchrun's variables (RANK, WORLD_SIZE,
LOCAL_RANK) or from Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID), and meets the others at
MASTER_ADDR:MASTER_PORT. gloo on CPU, NCCL on GPU. A single process needs none of it: every helper is then
the identity, so the 1-process run is the same code.

A workload trains data-parallel by splitting each global batch with :func:`shard` and calling
:func:`reduce_gradients` after ``backward()``: the weighted sum of the shards' mean-loss gradients is the
gradient of the global batch's mean loss, so 2 processes take the same steps as 1 (up to float order).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the MLPerf log and the run's summary; the others only train."""
        return self.rank == 0


_context = Context()


def context_from_env(env: Mapping[str, str]) -> Context:
    """torchrun's variables win over Slurm's (torchrun may itself run inside an allocation)."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return Context(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)),
                       int(env.get("GROUP_RANK", 0)))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return Context(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0)),
                       int(env.get("SLURM_NODEID", 0)))
    return Context()


def init(device: torch.device, env: Mapping[str, str] | None = None) -> Context:
    """Join the run's process group (a no-op for one process); return this process's place in it."""
    global _context
    ctx = context_from_env(os.environ if env is None else env)
    if ctx.world_size > 1 and not dist.is_initialized():
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise RuntimeError(f"rank {ctx.rank} of {ctx.world_size}: {', '.join(missing)} not set; start "
                               "multi-process runs through mlrepro.slurm.launch (srun or torchrun)")
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(ctx.local_rank)
        dist.init_process_group(backend, rank=ctx.rank, world_size=ctx.world_size)
    _context = ctx
    return ctx


def current() -> Context:
    return _context


def shard(batch: torch.Tensor) -> tuple[torch.Tensor, float]:
    """This rank's contiguous part of a global batch of indices, and its share of the batch."""
    if _context.world_size == 1:
        return batch, 1.0
    part = batch.tensor_split(_context.world_size)[_context.rank]
    return part, len(part) / max(1, len(batch))


def reduce_gradients(module: torch.nn.Module, share: float) -> None:
    """Sum the ranks' gradients, each weighted by its share of the global batch: one all-reduce of all of
    them flattened (one per parameter costs ten times the step itself on small models)."""
    if _context.world_size == 1:
        return
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads]).mul_(share)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def finish() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
