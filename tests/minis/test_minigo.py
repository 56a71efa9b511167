"""Fast unit tests of the mini MiniGo workload: Go rules, tree search, symmetries, the evaluation setup."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from mlrepro.core.minis import load_module, mini_dir


@pytest.fixture(scope="module")
def mg() -> ModuleType:
    return load_module("minigo")


@pytest.fixture(scope="module")
def params() -> dict[str, Any]:
    return yaml.safe_load((mini_dir("minigo") / "defaults.yaml").read_text())


def board(mg: ModuleType, rows: str, to_play: int = 1, ko: int = -1) -> Any:
    """A position from rows of ``X`` (black), ``O`` (white) and ``.``."""
    cells = [{"X": mg.BLACK, "O": mg.WHITE, ".": mg.EMPTY}[c] for c in rows.split()]
    return mg.Position(tuple(cells), to_play, ko)


def pt(r: int, c: int, size: int = 5) -> int:
    return r * size + c


# ------------------------------------------------------------------------------------------ rules
def test_single_stone_capture(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = board(mg, """
        . X . . .
        X O X . .
        . . . . .
        . . . . .
        . . . . .""")
    after = go.play(pos, pt(2, 1))  # black fills white's last liberty
    assert after.board[pt(1, 1)] == mg.EMPTY
    assert after.board[pt(2, 1)] == mg.BLACK
    assert after.to_play == mg.WHITE
    assert after.ko == -1  # the capturing stone has other liberties: no ko


def test_group_capture_and_liberties(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = board(mg, """
        . X X . .
        X O O X .
        . X . . .
        . . . . .
        . . . . .""")
    stones, libs = go.group(pos.board, pt(1, 1))
    assert stones == {pt(1, 1), pt(1, 2)}
    assert libs == {pt(2, 2)}
    after = go.play(pos, pt(2, 2))
    assert after.board[pt(1, 1)] == after.board[pt(1, 2)] == mg.EMPTY


def test_suicide_is_illegal_but_capturing_is_not(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = board(mg, """
        . X . . .
        X . . . .
        . . . . .
        . . . . .
        . . . . .""", to_play=mg.WHITE)
    with pytest.raises(mg.IllegalMove, match="suicide"):
        go.play(pos, pt(0, 0))
    assert not go.legal_moves(pos)[pt(0, 0)]
    # Same shape, but the black stones are in atari: white's move into the corner captures.
    pos = board(mg, """
        . X O . .
        X O . . .
        O . . . .
        . . . . .
        . . . . .""", to_play=mg.WHITE)
    assert go.legal_moves(pos)[pt(0, 0)]
    after = go.play(pos, pt(0, 0))
    assert after.board[pt(0, 1)] == after.board[pt(1, 0)] == mg.EMPTY


def test_occupied_point_is_illegal(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = go.play(go.initial(), pt(2, 2))
    with pytest.raises(mg.IllegalMove):
        go.play(pos, pt(2, 2))


def test_simple_ko(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = board(mg, """
        . X O . .
        X O . O .
        . X O . .
        . . . . .
        . . . . .""")
    after = go.play(pos, pt(1, 2))  # black captures the white stone at (1, 1)
    assert after.board[pt(1, 1)] == mg.EMPTY
    assert after.ko == pt(1, 1)
    assert not go.legal_moves(after)[pt(1, 1)]
    with pytest.raises(mg.IllegalMove, match="ko"):
        go.play(after, pt(1, 1))
    # After a move elsewhere by each side, white may retake.
    later = go.play(go.play(after, pt(4, 4)), pt(4, 0))
    assert later.ko == -1
    assert go.legal_moves(later)[pt(1, 1)]


def test_capturing_two_stones_sets_no_ko(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = board(mg, """
        . X X . .
        X O O . X
        . X X X .
        . . . . .
        . . . . .""")
    after = go.play(pos, pt(1, 3))
    assert after.board[pt(1, 1)] == after.board[pt(1, 2)] == mg.EMPTY
    assert after.ko == -1


def test_legal_mask_agrees_with_play(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 60)
    rng = np.random.default_rng(0)
    pos, checked = go.initial(), 0
    while not go.is_over(pos):
        legal = go.legal_moves(pos)
        for move in range(go.points + 1):
            try:
                go.play(pos, move)
                ok = True
            except mg.IllegalMove:
                ok = False
            assert ok == legal[move], (pos, move)
            checked += 1
        choices = np.flatnonzero(legal[:-1]) if legal[:-1].any() else [go.pass_move]
        pos = go.play(pos, int(rng.choice(choices)))
    assert checked > 500


def test_area_scoring_with_komi(mg: ModuleType) -> None:
    go = mg.Go(5, 2.5, 50)
    pos = board(mg, """
        . X O . .
        . X O . .
        X X O O .
        . . X O O
        . . X O .""")
    # Black: 6 stones, the regions (0,0)-(1,0) and (3,0)-(4,1); white: 7 stones, the region
    # (0,3)-(2,4) and (4,4).
    black = 6 + 2 + 4
    white = 7 + 5 + 1
    assert go.score(pos) == pytest.approx(black - white - 2.5)
    assert go.winner(pos) == mg.WHITE
    # An empty region touching both colours is neutral.
    pos = board(mg, """
        . . . . .
        . . . . .
        X . . . O
        . . . . .
        . . . . .""")
    assert go.score(pos) == pytest.approx(-2.5)


def test_two_passes_or_move_cap_end_the_game(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 6)
    pos = go.play(go.initial(), go.pass_move)
    assert not go.is_over(pos)
    assert go.is_over(go.play(pos, go.pass_move))
    assert not go.is_over(go.play(go.play(pos, 3), go.pass_move))  # a move resets the count
    for move in (0, 4, 20, 24, 12):
        assert not go.is_over(pos)
        pos = go.play(pos, move)
    assert pos.moves == 6 and go.is_over(pos)


def test_sensible_moves_skip_own_eyes_and_pass_only_at_the_end(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = board(mg, """
        . X . . .
        X . . . .
        . . . . .
        . . . . .
        . . . . .""")
    legal, sensible = go.legal_moves(pos), go.sensible_moves(pos)
    assert legal[pt(0, 0)] and not sensible[pt(0, 0)]  # black's own eye
    assert legal[go.pass_move] and not sensible[go.pass_move]
    assert not go.sensible_moves(pos._replace(to_play=mg.WHITE))[go.pass_move]
    full = board(mg, """
        . X X X X
        X X . X X
        X X X X .
        X . X X X
        X X X . X""")
    sensible = go.sensible_moves(full)
    assert list(np.flatnonzero(sensible)) == [go.pass_move]


def test_capturing_moves_and_greedy_opponent(mg: ModuleType) -> None:
    go = mg.Go(5, 0.5, 50)
    pos = board(mg, """
        . X . . .
        X O X . .
        . . . . .
        . . . . .
        . . . . .""")
    assert go.capturing_moves(pos) == [pt(2, 1)]
    rng = np.random.default_rng(0)
    assert all(mg.opponent_move(go, pos, rng, greedy=True) == pt(2, 1) for _ in range(5))
    moves = {mg.opponent_move(go, pos, rng, greedy=False) for _ in range(50)}
    assert len(moves) > 5 and pt(0, 0) not in moves  # random, never its own eye


def test_move_generators_agree_with_play(mg: ModuleType) -> None:
    """The fast move generators (liberties computed lazily, only where a move needs them) against the
    rules' definitions through play(), over random games on boards of several sizes."""
    checked = 0
    for size in (3, 4, 5, 6):
        go = mg.Go(size, 0.5, 3 * size * size)
        rng = np.random.default_rng(size)
        for _ in range(6):
            pos = go.initial()
            while not go.is_over(pos):
                me, sensible = pos.to_play, go.sensible_moves(pos)
                legal, capturing = np.zeros(go.points + 1, dtype=bool), []
                for move in range(go.points):
                    try:
                        after = go.play(pos, move)
                    except mg.IllegalMove:
                        continue
                    legal[move] = True
                    if any(after.board[p] == mg.EMPTY for p in range(go.points) if pos.board[p] == -me):
                        capturing.append(move)
                eyes = [all(pos.board[q] == me for q in go.neighbours[p]) for p in range(go.points)]
                expected = legal[:-1] & ~np.array(eyes)
                assert list(sensible[:-1]) == list(expected), pos
                assert sensible[-1] == (not expected.any())
                assert go.sensible_list(pos) == list(np.flatnonzero(sensible))
                assert list(go.legal_moves(pos)[:-1]) == list(legal[:-1])
                assert go.capturing_moves(pos) == capturing, pos
                checked += 1
                # Mostly sensible moves, sometimes any legal one (filling eyes makes suicides and kos).
                choices = np.flatnonzero(legal[:-1] if rng.random() < 0.3 else sensible)
                pos = go.play(pos, int(rng.choice(choices)) if len(choices) else go.pass_move)
    assert checked > 200


# ----------------------------------------------------------------------------------------- search
def make_searcher(mg: ModuleType, params: dict[str, Any], go: Any = None) -> tuple[Any, Any]:
    torch.manual_seed(0)
    go = go or mg.Go(5, 0.5, 50)
    net = mg.PolicyValueNet(5, 8, 1, 8)
    return go, mg.Searcher(go, net, torch.device("cpu"), params)


@pytest.mark.parametrize("readouts", [1, 8, 13])
def test_root_visits_sum_to_readouts(mg: ModuleType, params: dict[str, Any], readouts: int) -> None:
    go, searcher = make_searcher(mg, params)
    roots = [mg.Node(go, go.initial()), mg.Node(go, go.play(go.initial(), 12))]
    searcher.search(roots, readouts, np.random.default_rng(0))
    for root in roots:
        assert root.n.sum() == readouts == root.n_total
        assert not root.n[~root.legal].any()  # only sensible moves are searched
        assert root.prior.sum() == pytest.approx(1.0)


def test_reused_subtree_keeps_its_visits(mg: ModuleType, params: dict[str, Any]) -> None:
    go, searcher = make_searcher(mg, params)
    root = mg.Node(go, go.initial())
    searcher.search([root], 16, None)
    move = int(np.argmax(root.n))
    child = root.child(go, move)
    assert child is root.children[move]
    before = child.n_total
    assert before == root.n[move] - 1  # the first visit expanded it
    searcher.search([child], 16, None)
    assert child.n_total == 16


def test_search_finds_the_only_winning_move(mg: ModuleType, params: dict[str, Any]) -> None:
    """When every move ends the game, exact results back up and steer the search to the one winner."""
    pos = board(mg, """
        . O . X .
        O X X X X
        X . O X O
        O O . O O
        . O X . X""")
    go, searcher = make_searcher(mg, params, mg.Go(5, 0.5, 1))  # the game is scored after one move
    wins = [m for m in np.flatnonzero(go.sensible_moves(pos)) if go.winner(go.play(pos, m)) == mg.BLACK]
    assert wins == [pt(0, 0)] == go.capturing_moves(pos)  # capture the white stone at (1, 0)
    root = mg.Node(go, pos)
    searcher.search([root], 48, None)
    assert int(np.argmax(root.n)) == pt(0, 0)


def test_select_is_the_numpy_puct_formula(mg: ModuleType, params: dict[str, Any]) -> None:
    """select() in Python floats picks what the PUCT formula on numpy arrays picks, ties included."""
    go, searcher = make_searcher(mg, params)
    rng = np.random.default_rng(0)
    root = mg.Node(go, go.play(go.initial(), 12))
    searcher.search([root], 1, None)  # expands the root
    for trial in range(300):
        root.visits = [int(v) for v in rng.integers(0, 4, go.points + 1)]
        root.value_sums = [float(v) for v in rng.choice([-1.0, -0.5, 0.0, 0.25, 1.0], go.points + 1)]
        if trial % 3 == 0:  # equal priors and no visits: ties everywhere
            root.visits, root.value_sums = [0] * (go.points + 1), [0.0] * (go.points + 1)
            root.priors = [1 / 24] * (go.points + 1)
        root.n_total = sum(root.visits)
        n, w, prior = root.n, root.w, np.array(root.priors)
        q = np.where(n > 0, w / np.maximum(n, 1), root.value - 0.2)
        u = 1.5 * prior * math.sqrt(max(1, root.n_total)) / (1 + n)
        assert root.select(1.5, 0.2) == int(np.argmax(np.where(root.legal, q + u, -np.inf)))


# ------------------------------------------------------------------------------------ the workload
def test_symmetry_moves_stones_and_policy_alike(mg: ModuleType) -> None:
    x = torch.zeros(1, 3, 5, 5)
    pi = torch.zeros(1, 26)
    x[0, 0, 0, 1] = 1.0
    pi[0, pt(0, 1)] = 0.75
    pi[0, 25] = 0.25
    seen = set()
    for sym in mg.SYMMETRIES:
        tx, tpi = mg.apply_symmetry(x, pi, 5, sym)
        where = int(torch.argmax(tx[0, 0]))
        assert tpi[0, where] == 0.75 and tpi[0, 25] == 0.25
        seen.add(where)
    assert len(seen) == 8  # (0, 1) has 8 distinct images


def test_generate_data_is_deterministic_and_alternates_colours(mg: ModuleType, params: dict[str, Any],
                                                               tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for d, seed in ((a, 1), (b, 1), (c, 2)):
        d.mkdir()
        mg.generate_data(d, params, seed)
    assert (a / "eval_games.json").read_bytes() == (b / "eval_games.json").read_bytes()
    assert (a / "eval_games.json").read_bytes() != (c / "eval_games.json").read_bytes()
    games = json.loads((a / "eval_games.json").read_text())["games"]
    assert len(games) == params["data"]["eval_games"] and len(games) % 2 == 0
    assert [g["network_colour"] for g in games[:4]] == [mg.BLACK, mg.WHITE, mg.BLACK, mg.WHITE]
    assert all(len(g["opening"]) == params["data"]["opening_moves"] for g in games)


def test_network_shapes(mg: ModuleType) -> None:
    net = mg.PolicyValueNet(5, 8, 2, 16).eval()
    logits, value = net(torch.zeros(4, 3, 5, 5))
    assert logits.shape == (4, 26) and value.shape == (4,)
    assert bool((value.abs() <= 1).all())


def test_infer_is_forward_to_the_bit(mg: ModuleType) -> None:
    """The search's functional forward pass gives forward()'s outputs exactly, at batch sizes on both
    sides of the ones where PyTorch changes convolution algorithm."""
    torch.manual_seed(0)
    net = mg.PolicyValueNet(5, 16, 2, 32)
    with torch.no_grad():  # batch-norm statistics and affine parameters that are not the defaults
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.normal_()
                module.running_var.uniform_(0.5, 2.0)
                module.weight.normal_()
                module.bias.normal_()
    net.eval()
    for batch in (1, 3, 15, 16, 24, 48, 64):
        x = (torch.rand(batch, 3, 5, 5) < 0.4).float()
        with torch.no_grad():
            logits, value = net(x)
        fast_logits, fast_value = net.infer(x)
        assert torch.equal(logits, fast_logits) and torch.equal(value, fast_value)
    with pytest.raises(AssertionError):
        net.train().infer(x)
