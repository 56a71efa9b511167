"""Mini MiniGo: AlphaGo-Zero-style reinforcement learning of Go on a small board, trained to a win rate.

MLPerf's MiniGo trains a residual policy/value network on 9x9 Go from nothing but the rules: each
generation the current network plays games against itself, choosing every move by Monte-Carlo tree
search (MCTS) guided by the network; the positions, the search's visit counts and the final results
become the next training examples; the network trains on a sliding window of recent examples and
the loop repeats until the network beats a fixed target model in at least half of its games.

This mini workload keeps every one of those parts, scaled down so that a run takes seconds:

- Go rules on a ``board_size`` board (5x5 by default): captures, suicide forbidden, simple ko,
  passing (two passes end the game), a move cap, area (Tromp-Taylor) scoring with komi. Players
  choose among the "sensible" moves: legal, not filling their own single-point eye, pass only when
  nothing else is left (MiniGo similarly forbids play inside one's own pass-alive areas).
- A small residual tower with a policy head (one logit per point plus pass) and a tanh value head,
  as in AlphaGo Zero / MiniGo, with batch norm.
- PUCT tree search with ``num_readouts`` simulations per move (the reused subtree's visits count),
  Dirichlet noise at the root of self-play searches, MiniGo's "value init penalty" for unvisited
  children and no virtual loss: the network evaluations are batched across the ``parallel_games``
  games played at once instead.
- Self-play with proportional move choice for the first ``softpick_moves`` moves, then the most
  visited move; no resignation. Examples (position, visit distribution, result) go into a window of
  the latest ``window_size`` examples; each generation trains ``steps_per_generation`` SGD steps on
  batches drawn from the window, each batch under one random symmetry of the board.
- Evaluation: the network plays ``eval_games`` games against a fixed opponent, half with each
  colour, from fixed two-move openings. With ``eval_readouts: 0`` (the default) it plays its policy
  network's most likely sensible move, without search; otherwise it searches. There is no target
  model to download here, so the opponent is a seeded player that captures whenever it can and
  otherwise plays a random sensible move. Its seeds and the openings are the "dataset" written by
  ``generate_data``: fixed across runs. The metric, logged as ``eval_accuracy``, is the win rate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlrepro.training.epoch_order import epoch_generator
from mlrepro.training.schedules import FunctionLR

BLACK, WHITE, EMPTY = 1, -1, 0


# ------------------------------------------------------------------------------------ the rules
class Position(NamedTuple):
    board: tuple[int, ...]  # size*size points, row-major: BLACK, WHITE or EMPTY
    to_play: int = BLACK
    ko: int = -1  # the point the player to move may not retake at, or -1
    passes: int = 0  # consecutive passes just played
    moves: int = 0  # moves played so far (passes included)


class IllegalMove(ValueError):
    pass


def _no_neighbours(board: Sequence[int]) -> tuple[int, ...]:
    return ()


class Go:
    """The rules of Go on a ``size`` x ``size`` board. Moves are point indices; ``size*size`` is pass."""

    def __init__(self, size: int, komi: float, max_moves: int) -> None:
        self.size, self.komi, self.max_moves = size, komi, max_moves
        self.points = size * size
        self.pass_move = self.points
        self.neighbours: list[tuple[int, ...]] = []
        for p in range(self.points):
            r, c = divmod(p, size)
            adj = [(r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)]
            self.neighbours.append(tuple(i * size + j for i, j in adj if 0 <= i < size and 0 <= j < size))
        # around[p](board): the colours of p's neighbours in one C call (itemgetter) instead of a Python
        # loop, as the rules ask it of nearly every point of every position the search expands. Every
        # point has 2 to 4 neighbours (none on a 1x1 board), so itemgetter returns a tuple.
        self.around: list[Callable[[Sequence[int]], tuple[int, ...]]] = [
            itemgetter(*nb) if len(nb) > 1 else _no_neighbours for nb in self.neighbours]

    def initial(self) -> Position:
        return Position((EMPTY,) * self.points)

    def group(self, board: tuple[int, ...] | list[int], p: int) -> tuple[set[int], set[int]]:
        """The stones of the group at ``p`` and their liberties (flood fill)."""
        colour, stones, libs, todo = board[p], {p}, set(), [p]
        while todo:
            q = todo.pop()
            for r in self.neighbours[q]:
                if board[r] == EMPTY:
                    libs.add(r)
                elif board[r] == colour and r not in stones:
                    stones.add(r)
                    todo.append(r)
        return stones, libs

    def play(self, pos: Position, move: int) -> Position:
        """The position after ``move``; raises IllegalMove for an occupied point, suicide or a ko retake."""
        me = pos.to_play
        if move == self.pass_move:
            return Position(pos.board, -me, -1, pos.passes + 1, pos.moves + 1)
        if pos.board[move] != EMPTY:
            raise IllegalMove(f"point {move} is occupied")
        if move == pos.ko:
            raise IllegalMove(f"point {move} retakes a ko")
        board = list(pos.board)
        board[move] = me
        captured: list[int] = []
        for q in self.neighbours[move]:
            # An opponent stone next to an empty point keeps that liberty: only flood-fill the others.
            if board[q] == -me and EMPTY not in self.around[q](board):
                stones, libs = self.group(board, q)
                if not libs:
                    captured.extend(stones)
                    for s in stones:
                        board[s] = EMPTY
        ko = -1
        # A new stone next to an empty point is no suicide, and can only make a ko by capturing one stone.
        if len(captured) == 1 or EMPTY not in self.around[move](board):
            stones, libs = self.group(board, move)
            if not libs:
                raise IllegalMove(f"point {move} is suicide")
            # Simple ko: a single stone that captured a single stone and now has that point as its only
            # liberty may be captured back at once, which would repeat the position; forbid that retake.
            if len(captured) == 1 and len(stones) == 1 and libs == {captured[0]}:
                ko = captured[0]
        return Position(tuple(board), -me, ko, 0, pos.moves + 1)

    def liberties(self, board: tuple[int, ...]) -> dict[int, int]:
        """For every stone, the number of liberties of its group."""
        libs_of: dict[int, int] = {}
        for p in range(self.points):
            if board[p] != EMPTY and p not in libs_of:
                stones, libs = self.group(board, p)
                for s in stones:
                    libs_of[s] = len(libs)
        return libs_of

    def _in_atari(self, board: tuple[int, ...], q: int, known: dict[int, bool]) -> bool:
        """Whether the group at ``q``, a stone next to an empty point, has that one liberty only.

        ``known`` remembers the answer for the stones seen: the move generators below ask it of the
        groups around many points of one position.
        """
        if self.around[q](board).count(EMPTY) > 1:  # two liberties already
            return False
        atari = known.get(q)
        if atari is None:  # flood-fill the group until it shows a second liberty
            colour, stones, todo, liberty, atari = board[q], {q}, [q], -1, True
            while todo and atari:
                for r in self.neighbours[todo.pop()]:
                    if board[r] == EMPTY:
                        if liberty not in (-1, r):
                            atari = False
                            break
                        liberty = r
                    elif board[r] == colour and r not in stones:
                        stones.add(r)
                        todo.append(r)
            for s in stones:  # the whole group, or a part of it that showed two liberties
                known[s] = atari
        return atari

    def _legal_surrounded(self, board: tuple[int, ...], me: int, p: int, known: dict[int, bool]) -> bool:
        """Whether playing at the empty point ``p``, all of whose neighbours are stones, is legal: it
        joins a group of ``me`` that keeps another liberty or captures an opponent group in atari."""
        for q in self.neighbours[p]:  # noqa: SIM110 (a loop, faster than any() on a generator)
            if self._in_atari(board, q, known) != (board[q] == me):
                return True
        return False

    def legal_moves(self, pos: Position) -> np.ndarray:
        """A boolean mask over the ``points + 1`` moves (pass is always legal)."""
        board, me, known = pos.board, pos.to_play, {}
        legal = np.zeros(self.points + 1, dtype=bool)
        legal[self.pass_move] = True
        for p in range(self.points):
            if board[p] != EMPTY or p == pos.ko:
                continue
            # Legal if the new stone touches a liberty, joins a group that keeps another one,
            # or captures an opponent group in atari.
            legal[p] = EMPTY in self.around[p](board) or self._legal_surrounded(board, me, p, known)
        return legal

    def sensible_moves(self, pos: Position) -> np.ndarray:
        """The legal moves less filling one's own eye (a point all of whose neighbours are own stones);
        pass only when nothing else is left.

        Every player here chooses among these, as Monte-Carlo Go programs' playouts do and as MiniGo
        forbids play inside one's own pass-alive areas: without it, a tiny network learning from
        scratch soon discovers that passing early or destroying its own eyes ends games at random.
        """
        moves = np.zeros(self.points + 1, dtype=bool)
        moves[self.sensible_list(pos)] = True
        return moves

    def sensible_list(self, pos: Position) -> list[int]:
        """The sensible moves in increasing order (pass last, alone): what the search expands with.

        Most empty points touch another empty point, which makes them legal and no eye at once; only
        the points surrounded by stones, some of them the opponent's, need their groups' liberties.
        """
        board, me, known = pos.board, pos.to_play, {}
        moves = []
        for p, colour in enumerate(board):
            if colour != EMPTY or p == pos.ko:
                continue
            around = self.around[p](board)
            if EMPTY in around or (-me in around and self._legal_surrounded(board, me, p, known)):
                moves.append(p)
        return moves or [self.pass_move]

    def capturing_moves(self, pos: Position) -> list[int]:
        """The points where the player to move captures: next to an opponent group with one liberty."""
        board, me, known = pos.board, pos.to_play, {}
        return [p for p, colour in enumerate(board) if colour == EMPTY and p != pos.ko
                and -me in self.around[p](board)
                and any(board[q] == -me and self._in_atari(board, q, known) for q in self.neighbours[p])]

    def is_over(self, pos: Position) -> bool:
        return pos.passes >= 2 or pos.moves >= self.max_moves

    def score(self, pos: Position) -> float:
        """Area score, black minus white minus komi: stones plus empty regions that touch one colour."""
        board = pos.board
        total = float(sum(board))
        seen: set[int] = set()
        for p in range(self.points):
            if board[p] != EMPTY or p in seen:
                continue
            region, borders, todo = {p}, set(), [p]
            while todo:
                q = todo.pop()
                for r in self.neighbours[q]:
                    if board[r] == EMPTY and r not in region:
                        region.add(r)
                        todo.append(r)
                    elif board[r] != EMPTY:
                        borders.add(board[r])
            seen |= region
            if len(borders) == 1:
                total += borders.pop() * len(region)
        return total - self.komi

    def winner(self, pos: Position) -> int:
        return BLACK if self.score(pos) > 0 else WHITE

    def features(self, pos: Position) -> np.ndarray:
        """Input planes for the player to move: own stones, the opponent's, ones if black is to play."""
        return self.batch_features([pos])[0]

    def batch_features(self, positions: Sequence[Position]) -> np.ndarray:
        """``features`` of several positions, stacked, in a few numpy calls for all of them."""
        boards = np.array([pos.board for pos in positions], dtype=np.int8).reshape(-1, self.size, self.size)
        to_play = np.array([pos.to_play for pos in positions], dtype=np.int8).reshape(-1, 1, 1)
        planes = np.empty((len(positions), 3, self.size, self.size), dtype=np.float32)
        planes[:, 0] = boards == to_play
        planes[:, 1] = boards == -to_play
        planes[:, 2] = to_play == BLACK
        return planes


def opponent_move(go: Go, pos: Position, rng: np.random.Generator, greedy: bool) -> int:
    """The evaluation opponent: a uniformly random sensible move; a ``greedy`` one captures when it can."""
    choices = go.sensible_list(pos)
    if greedy:
        sensible = set(choices)
        choices = [p for p in go.capturing_moves(pos) if p in sensible] or choices
    return int(choices[rng.integers(len(choices))])


# ---------------------------------------------------------------------------------------- data
def generate_data(out_dir: Path, params: dict[str, Any], seed: int) -> None:
    """MiniGo has no dataset; write the fixed evaluation setup: openings, colours and opponent seeds."""
    d = params["data"]
    go = Go(d["board_size"], d["komi"], d["max_moves"])
    rng = np.random.default_rng(seed)
    games = []
    for i in range(d["eval_games"]):
        pos, opening = go.initial(), []
        for _ in range(d["opening_moves"]):
            move = opponent_move(go, pos, rng, greedy=False)
            opening.append(move)
            pos = go.play(pos, move)
        games.append({
            "network_colour": BLACK if i % 2 == 0 else WHITE,
            "opening": opening,
            "opponent_seed": int(rng.integers(2**31)),
        })
    setup = {k: d[k] for k in ("board_size", "komi", "max_moves")} | {"games": games}
    (out_dir / "eval_games.json").write_text(json.dumps(setup, indent=1) + "\n")


# --------------------------------------------------------------------------------------- model
class ResidualBlock(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(out)))


class PolicyValueNet(nn.Module):
    """AlphaGo Zero's network in miniature: a residual tower, a policy head and a value head."""

    def __init__(self, size: int, channels: int, blocks: int, value_width: int) -> None:
        super().__init__()
        points = size * size
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU())
        self.tower = nn.Sequential(*[ResidualBlock(channels) for _ in range(blocks)])
        self.policy_conv = nn.Sequential(nn.Conv2d(channels, 2, 1, bias=False), nn.BatchNorm2d(2), nn.ReLU())
        self.policy_fc = nn.Linear(2 * points, points + 1)
        self.value_conv = nn.Sequential(nn.Conv2d(channels, 1, 1, bias=False), nn.BatchNorm2d(1), nn.ReLU())
        self.value_fc = nn.Sequential(nn.Linear(points, value_width), nn.ReLU(), nn.Linear(value_width, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy logits over points + pass, and the value in [-1, 1] for the player to move."""
        x = self.tower(self.stem(x))
        policy = self.policy_fc(self.policy_conv(x).flatten(1))
        value = torch.tanh(self.value_fc(self.value_conv(x).flatten(1))).squeeze(1)
        return policy, value

    @torch.inference_mode()
    def infer(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` in evaluation mode, for the search's thousands of batches of a few dozen boards.

        It calls the torch functions that the layers' forward methods call, with the same arguments, so
        its outputs are forward's to the bit (tests/minis/test_minigo.py checks it), but without
        nn.Module.__call__ and the layers' Python code, a tenth of the time of such a small batch.
        """
        assert not self.training, "infer() is forward() in evaluation mode"
        x = _conv_bn_relu(self.stem, x)
        for block in self.tower:
            out = F.relu(_batch_norm(block.bn1, _conv(block.conv1, x)))
            x = F.relu(x + _batch_norm(block.bn2, _conv(block.conv2, out)))
        policy_fc, (hidden, _, value_out) = self.policy_fc, self.value_fc
        policy = F.linear(_conv_bn_relu(self.policy_conv, x).flatten(1), policy_fc.weight, policy_fc.bias)
        v = F.relu(F.linear(_conv_bn_relu(self.value_conv, x).flatten(1), hidden.weight, hidden.bias))
        return policy, torch.tanh(F.linear(v, value_out.weight, value_out.bias)).squeeze(1)


# What nn.Conv2d (zero padding), nn.BatchNorm2d in evaluation mode and nn.ReLU call, for infer().
def _conv(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def _batch_norm(bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    # The running statistics, no update (training=False makes the momentum unused).
    return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)


def _conv_bn_relu(layers: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    conv, bn, _ = layers
    return F.relu(_batch_norm(bn, _conv(conv, x)))


# ---------------------------------------------------------------------------------------- search
class Node:
    """One position in the search tree, with per-move statistics for the player to move there.

    The statistics are Python lists indexed by move (``points + 1`` long) and the search visits only
    the sensible ``moves``: on a 5x5 board numpy's per-call overhead on 26-element arrays cost more
    than the arithmetic. ``n``, ``w`` and ``prior`` are also there as numpy arrays for the callers.
    """

    __slots__ = ("children", "legal", "moves", "n_total", "pos", "prior", "priors", "terminal", "value",
                 "value_sums", "visits")

    def __init__(self, go: Go, pos: Position) -> None:
        self.pos = pos
        self.children: dict[int, Node] = {}
        self.terminal = go.is_over(pos)
        self.value = 0.0  # the network's (or the final score's) value for the player to move
        if self.terminal:
            self.value = 1.0 if go.winner(pos) == pos.to_play else -1.0
        self.prior: np.ndarray | None = None  # set by expand()
        self.n_total = 0

    def expand(self, go: Go, logits: np.ndarray, value: float) -> None:
        self.moves = go.sensible_list(self.pos)
        self.legal = np.zeros(go.points + 1, dtype=bool)
        self.legal[self.moves] = True
        p = np.where(self.legal, np.exp(logits - logits[self.legal].max()), 0.0)
        self.prior = p / p.sum()
        self.priors: list[float] = self.prior.tolist()
        self.visits = [0] * (go.points + 1)  # visits per move
        self.value_sums = [0.0] * (go.points + 1)  # summed values per move, for the player to move here
        self.value = value

    def mix_noise(self, noise: np.ndarray, noise_mix: float) -> None:
        """Mix ``noise`` (one value per sensible move) into the prior: self-play's exploration at the root."""
        assert self.prior is not None
        self.prior[self.legal] = (1 - noise_mix) * self.prior[self.legal] + noise_mix * noise
        self.priors = self.prior.tolist()

    @property
    def n(self) -> np.ndarray:
        """Visits per move."""
        return np.array(self.visits, dtype=np.float64)

    @property
    def w(self) -> np.ndarray:
        """Summed values per move, for the player to move here."""
        return np.array(self.value_sums, dtype=np.float64)

    def select(self, c_puct: float, value_init_penalty: float) -> int:
        """PUCT: argmax of Q + c * P * sqrt(N) / (1 + n); unvisited moves start at Q = V - penalty.

        In Python floats, exactly as numpy computed it on the whole arrays before: per move the same
        float64 operations in the same order (Q = w / n; c * P, times sqrt(N), over 1 + n; Q + U), and
        the first of equal maxima wins as with np.argmax (a NaN, too: np.argmax returns the first NaN).
        """
        sqrt_total = math.sqrt(max(1, self.n_total))
        unvisited = self.value - value_init_penalty
        visits, sums, priors = self.visits, self.value_sums, self.priors
        best, best_score = self.moves[0], -math.inf
        for move in self.moves:
            n = visits[move]
            score = (sums[move] / n if n > 0 else unvisited) + c_puct * priors[move] * sqrt_total / (1 + n)
            if score > best_score:
                best, best_score = move, score
            elif score != score:  # NaN
                return move
        return best

    def child(self, go: Go, move: int) -> Node:
        """The node after ``move``: the search's subtree when it has one, so that it is reused."""
        return self.children.get(move) or Node(go, go.play(self.pos, move))


def evaluation_mode(net: nn.Module) -> None:
    """``net.eval()`` unless it is in evaluation mode already: eval() walks every submodule, and the
    search asks for it before every move."""
    if net.training:
        net.eval()


class Searcher:
    """Batched MCTS: searches from many roots at once, evaluating one leaf of each in one network call."""

    def __init__(self, go: Go, net: PolicyValueNet, device: torch.device, p: dict[str, Any]) -> None:
        self.go, self.net, self.device = go, net, device
        self.c_puct = p["c_puct"]
        self.value_init_penalty = p["value_init_penalty"]
        self.dirichlet_alpha = p["dirichlet_alpha"]
        self.noise_mix = p["noise_mix"]

    @torch.no_grad()
    def evaluate(self, nodes: list[Node]) -> None:
        if not nodes:
            return
        x = torch.from_numpy(self.go.batch_features([n.pos for n in nodes])).to(self.device)
        # The search and the evaluation put the network in evaluation mode, where infer() is forward().
        logits, values = self.net(x) if self.net.training else self.net.infer(x)
        logits_np, values_np = logits.double().cpu().numpy(), values.double().cpu().numpy()
        for node, lg, v in zip(nodes, logits_np, values_np, strict=True):
            node.expand(self.go, lg, float(v))

    def search(self, roots: list[Node], readouts: int, rng: np.random.Generator | None) -> None:
        """Simulate from each (non-terminal) root until it has ``readouts`` visits, reused ones included.

        With ``rng``, Dirichlet noise is mixed into the roots' priors (self-play's exploration).
        """
        evaluation_mode(self.net)
        self.evaluate([r for r in roots if r.prior is None])
        if rng is not None:
            for root in roots:
                root.mix_noise(rng.dirichlet([self.dirichlet_alpha] * len(root.moves)), self.noise_mix)
        c_puct, penalty, play = self.c_puct, self.value_init_penalty, self.go.play
        while todo := [r for r in roots if r.n_total < readouts]:
            paths: list[list[tuple[Node, int]]] = []
            leaves: list[Node] = []
            for root in todo:
                node, path = root, []
                while True:  # descend until a new node or the end of the game
                    move = node.select(c_puct, penalty)
                    path.append((node, move))
                    child = node.children.get(move)
                    if child is None:
                        child = node.children[move] = Node(self.go, play(node.pos, move))
                        if not child.terminal:
                            leaves.append(child)
                        break
                    if child.terminal:
                        break
                    node = child
                path.append((child, -1))
                paths.append(path)
            self.evaluate(leaves)
            for path in paths:  # back up the leaf's value, flipping sides at every ply
                value = path[-1][0].value
                for node, move in reversed(path[:-1]):
                    value = -value
                    node.visits[move] += 1
                    node.value_sums[move] += value
                    node.n_total += 1


# -------------------------------------------------------------------------------- the workload
SYMMETRIES = [(k, flip) for k in range(4) for flip in (False, True)]


def apply_symmetry(x: torch.Tensor, pi: torch.Tensor, size: int, sym: tuple[int, bool]):
    """Rotate/flip board planes (B, C, size, size) and board policies (B, size*size + 1) alike."""
    k, flip = sym
    board_pi = pi[:, :-1].reshape(-1, 1, size, size)
    if flip:
        x, board_pi = x.flip(-1), board_pi.flip(-1)
    x, board_pi = torch.rot90(x, k, (-2, -1)), torch.rot90(board_pi, k, (-2, -1))
    return x, torch.cat([board_pi.flatten(1), pi[:, -1:]], 1)


class Workload:
    higher_is_better = True
    grad_clip_norm = None

    def __init__(self, data_dir: Path, params: dict[str, Any], device: torch.device, seed: int) -> None:
        self.device, self.seed = device, seed
        self.p = params
        setup = json.loads((data_dir / "eval_games.json").read_text())
        self.go = Go(setup["board_size"], setup["komi"], setup["max_moves"])
        self.eval_games: list[dict[str, Any]] = setup["games"]
        self.model = PolicyValueNet(self.go.size, params["channels"], params["blocks"],
                                    params["value_width"]).to(device)
        self.searcher = Searcher(self.go, self.model, device, params)
        self.batch = params["batch_size"]
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=params["lr_rates"][0],
                                         momentum=params["momentum"], weight_decay=params["weight_decay"])
        self.scheduler = FunctionLR(self.optimizer, self.lr)
        # The replay window: the latest ``window_size`` (features, visit distribution, result) examples.
        self.window: list[tuple[np.ndarray, np.ndarray, float]] = []
        games = params["parallel_games"]
        self.hyperparameters = {
            "global_batch_size": self.batch,
            "train_batch_size": self.batch,
            "opt_name": "sgd",
            "opt_base_learning_rate": params["lr_rates"][0],
            "lr_rates": params["lr_rates"],
            "lr_boundaries": params["lr_boundaries"],
            "opt_weight_decay": params["weight_decay"],
            "sgd_opt_momentum": params["momentum"],
            "num_readouts": params["num_readouts"],
            "value_init_penalty": params["value_init_penalty"],
            "dirichlet_alpha": params["dirichlet_alpha"],
            "noise_mix": params["noise_mix"],
            "holdout_pct": 0.0,  # every self-play example is used for training
            "disable_resign_pct": 1.0,  # no game ever resigns...
            "min_resign_threshold": -1.0,  # ...as no value is below -1
            "max_resign_threshold": -1.0,
            "parallel_games": games,
            "virtual_losses": 1,  # one leaf per search per batch: batching is across games
            "min_selfplay_games_per_generation": games,
            "actual_selfplay_games_per_generation": games,
            "window_size": params["window_size"],
            "board_size": self.go.size,
            "komi": self.go.komi,
        }
        self.train_samples = params["steps_per_generation"] * self.batch  # examples trained per generation
        self.eval_samples = len(self.eval_games)  # games played per evaluation

    def initialized_tensors(self) -> list[str]:
        return [name for name, _ in self.model.named_parameters()]

    def _rng(self, epoch: int, stream: int) -> np.random.Generator:
        return np.random.default_rng([self.seed % 2**32, epoch, stream])

    # -- self-play: one generation of games, every move chosen by tree search -------------------
    def self_play(self, epoch: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
        go, rng = self.go, self._rng(epoch, 0)
        nodes = [Node(go, go.initial()) for _ in range(self.p["parallel_games"])]
        history: list[list[tuple[np.ndarray, np.ndarray, int]]] = [[] for _ in nodes]
        active = list(range(len(nodes)))
        while active:
            self.searcher.search([nodes[g] for g in active], self.p["num_readouts"], rng)
            features = go.batch_features([nodes[g].pos for g in active])
            for g, x in zip(active, features, strict=True):
                root = nodes[g]
                pi = root.n / root.n_total
                history[g].append((x, pi.astype(np.float32), root.pos.to_play))
                if root.pos.moves < self.p["softpick_moves"]:
                    move = int(rng.choice(len(pi), p=pi))
                else:
                    move = int(np.argmax(root.n))
                nodes[g] = root.child(go, move)
            active = [g for g in active if not nodes[g].terminal]
        examples = []
        for node, game in zip(nodes, history, strict=True):
            winner = go.winner(node.pos)
            examples += [(x, pi, 1.0 if colour == winner else -1.0) for x, pi, colour in game]
        return examples

    def lr(self, step: int) -> float:
        return self.p["lr_rates"][sum(step >= b for b in self.p["lr_boundaries"])]

    def batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """A generation: self-play adds its games to the replay window, then the network trains on
        random, randomly rotated or mirrored minibatches of the window."""
        self.window = (self.window + self.self_play(epoch))[-self.p["window_size"]:]
        x_all = torch.from_numpy(np.stack([e[0] for e in self.window])).to(self.device)
        pi_all = torch.from_numpy(np.stack([e[1] for e in self.window])).to(self.device)
        z_all = torch.tensor([e[2] for e in self.window], dtype=torch.float32, device=self.device)
        gen = epoch_generator(self.seed, epoch)
        self.model.train()  # self-play searched with it in evaluation mode
        for _ in range(self.p["steps_per_generation"]):
            idx = torch.randint(len(self.window), (self.batch,), generator=gen).to(self.device)
            sym = SYMMETRIES[int(torch.randint(len(SYMMETRIES), (1,), generator=gen))]
            x, pi = apply_symmetry(x_all[idx], pi_all[idx], self.go.size, sym)
            yield x, pi, z_all[idx]

    def loss(self, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, pi, z = batch
        logits, value = self.model(x)
        return -(pi * F.log_softmax(logits, 1)).sum(1).mean() + F.mse_loss(value, z)

    # -- evaluation: the network, searching, against the fixed opponent --------------------------
    def evaluate(self, epoch: int) -> float:
        go = self.go
        nodes, colours, rngs = [], [], []
        for game in self.eval_games:
            pos = go.initial()
            for move in game["opening"]:
                pos = go.play(pos, move)
            nodes.append(Node(go, pos))
            colours.append(game["network_colour"])
            rngs.append(np.random.default_rng(game["opponent_seed"]))
        active = list(range(len(nodes)))
        while active:
            ours = [g for g in active if nodes[g].pos.to_play == colours[g]]
            readouts = self.p["eval_readouts"]
            if readouts > 0:
                self.searcher.search([nodes[g] for g in ours], readouts, None)
            else:  # the policy network alone: its most likely sensible move
                evaluation_mode(self.model)
                self.searcher.evaluate([nodes[g] for g in ours if nodes[g].prior is None])
            for g in active:
                node = nodes[g]
                if g in ours:
                    move = int(np.argmax(node.n if readouts > 0 else node.prior))
                else:
                    move = opponent_move(go, node.pos, rngs[g], self.p["greedy_opponent"])
                nodes[g] = node.child(go, move)
            active = [g for g in active if not nodes[g].terminal]
        wins = sum(go.winner(node.pos) == c for node, c in zip(nodes, colours, strict=True))
        return wins / len(nodes)
