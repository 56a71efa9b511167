"""Each epoch's draws (mlrepro.training.epoch_order): a permutation cut into batches, fixed by seed and epoch."""

from __future__ import annotations

import torch

from mlrepro.training.epoch_order import epoch_generator, shuffled_batches


def test_batches_are_a_permutation_in_ceil_n_over_b_batches() -> None:
    batches = list(shuffled_batches(10, 4, epoch_generator(3, 1), torch.device("cpu")))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))


def test_order_depends_on_seed_and_epoch_only() -> None:
    def order(seed: int, epoch: int) -> list[int]:
        return torch.cat(list(shuffled_batches(50, 8, epoch_generator(seed, epoch), torch.device("cpu")))).tolist()

    assert order(3, 2) == order(3, 2)
    assert order(3, 2) != order(3, 3)
    assert order(3, 2) != order(4, 2)
