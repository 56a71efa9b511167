"""The judging version's own package checker and result summarizer, on scratch copies of a package.

Used when a round is judged by its own mlperf-logging (``versions``): the checks and the scoring of
each release differ in ways the audit's fast re-implementation (``package``, ``rcp``, ``scoring``)
follows only for the installed release, so here the official functions run as they are, unpatched
but for ``fastpath``'s result-neutral fast paths (unless the audit is told not to use them). They
write ``scaling.json`` into the folders they read, so they run on a copy of each organisation
(regular files only: a symlink or a file over the size limit is left out, as the audit leaves it
out), never on the package:

* ``check_training_package`` on a fresh copy; what it logs is attributed to the benchmark folder
  whose section it falls in (its " Running compliance checks in dir" line), or to the whole
  organisation before the first section;
* then ``summarize_results`` twice on the same copy, as the review runs it after the package
  checker: from 2.1 the package checker's RCP check writes ``scaling.json`` (and from 6.0 the
  summarizer's own first run too), which the summarizer applies. The second run's scores are the
  published ones (the project's convention for "the official tool": its second run); divided by
  the factors it read, the raw ones. Scores are taken per system folder from its
  ``_compute_strong_scaling_scores`` calls, the same function in every release since 1.1.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_logging.package_checker import package_checker
from mlperf_logging.result_summarizer import result_summarizer

from mlrepro.audit import discover, engine, package, rcp, rcp_review
from mlrepro.audit.package import PackageVerdict

_SECTION = " Running compliance checks in dir %s"
Scores = dict[str, dict[str, float]]  # system folder -> benchmark -> minutes


@dataclass
class SummarizerScores:
    raw: Scores = field(default_factory=dict)  # the second run over the factors it applies
    published: Scores = field(default_factory=dict)  # the second run
    energy: Scores = field(default_factory=dict)  # the second run's "<benchmark>:Energy" (joules), 4.0 on
    crash: str = ""  # the exception the official summarizer dies of on this organisation


def _copy(org: Path, dest: Path, max_bytes: int | None) -> Path:
    def ignore(folder: str, names: list[str]) -> set[str]:
        paths = {n: Path(folder) / n for n in names}
        return {n for n, p in paths.items()
                if p.is_symlink() or (not p.is_dir() and discover.entry_problem(p, org, max_bytes) is not None)}

    target = dest / org.name
    shutil.copytree(org, target, symlinks=True, ignore=ignore)
    return target


class _Sections(logging.Handler):
    """What the package checker logs at WARNING and above, by the benchmark folder it is checking."""

    def __init__(self, root: Path) -> None:
        super().__init__(logging.INFO)
        self.root = root
        self.where: tuple[str, str] = ("", "")  # (system, benchmark) of the section being checked
        self.records: list[tuple[tuple[str, str], int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == _SECTION and isinstance(record.args, tuple) and record.args:
            try:
                rel = Path(str(record.args[0])).relative_to(self.root / "results").parts
            except ValueError:  # a folder outside results/: the organisation as a whole
                rel = ()
            self.where = (rel[0], rel[-1]) if len(rel) >= 2 else ("", "")
        elif record.levelno >= logging.WARNING:
            self.records.append((self.where, record.levelno, record.getMessage().strip()))


@contextlib.contextmanager
def _only(handler: logging.Handler) -> Iterator[None]:
    """The root logger with ``handler`` alone at INFO (the checker says where it is at INFO)."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers, root.level = [handler], logging.INFO
    try:
        yield
    finally:
        root.handlers, root.level = saved


def _call(function: Callable[..., Any], parser: Any, argv: list[str]) -> Any:
    """``function`` with the arguments its own CLI parser gives ``argv`` (signatures differ by release)."""
    args = vars(parser.parse_args(argv))
    return function(**{name: args[name] for name in inspect.signature(function).parameters})


def package_verdict(copy: Path, usage: str, ruleset: str) -> PackageVerdict:
    """The judging release's ``check_training_package`` verdict on a scratch copy of one organisation."""
    verdict = PackageVerdict()
    sections = _Sections(copy)
    try:
        with _only(sections), contextlib.redirect_stdout(io.StringIO()):
            _call(package_checker.check_training_package, package_checker.get_parser(),
                  [str(copy), usage, ruleset, "--log_output", str(copy.parent / "package_checker.log")])
    except Exception as e:
        msg = f"the official package checker crashes on this organisation: {type(e).__name__}: {e}"
        verdict.error(msg)
        verdict.official_crash.append(msg)
    for (system, benchmark), level, message in sections.records:
        where = f"{system}/{benchmark}: " if system else ""
        if level >= logging.ERROR:
            verdict.error(where + message, system=system, benchmark=benchmark)
        else:
            verdict.warnings.append(where + message)
    return verdict


def _factors(copy: Path) -> Scores:
    """The ``scaling.json`` factors in the copy now: system folder -> benchmark -> factor."""
    out: Scores = {}
    for path in copy.glob("results/*/*/scaling.json"):
        try:
            factor = float(json.loads(path.read_text(encoding="utf-8"))["scaling_factor"])
        except (OSError, ValueError, KeyError, TypeError):  # the summarizer itself stops on such a file
            continue
        out.setdefault(path.parent.parent.name, {})[str(result_summarizer._benchmark_alias(path.parent.name))] = factor
    return out


def summarizer_scores(copy: Path, usage: str, ruleset: str) -> SummarizerScores:
    """The judging release's ``summarize_results``, twice on the copy the package checker has seen;
    the raw scores are the second run's over the factors it applies."""
    out = SummarizerScores()
    official = result_summarizer._compute_strong_scaling_scores
    energy: Scores = {}  # the last run's
    published: Scores = {}

    def spy(desc: Any, system_folder: str, *args: Any, **kwargs: Any) -> Any:
        result = official(desc, system_folder, *args, **kwargs)
        published[Path(system_folder).name], energy[Path(system_folder).name] = _scores(result)
        return result

    result_summarizer._compute_strong_scaling_scores = spy
    try:
        with _only(logging.NullHandler()), contextlib.redirect_stdout(io.StringIO()):
            result_summarizer.summarize_results(str(copy), usage, ruleset)
            factors = _factors(copy)  # what the second run reads
            result_summarizer.summarize_results(str(copy), usage, ruleset)
    except Exception as e:
        out.crash = f"{type(e).__name__}: {e}"
        return out
    finally:
        result_summarizer._compute_strong_scaling_scores = official
    out.published, out.energy = published, energy
    out.raw = {system: {b: score / factors.get(system, {}).get(b, 1.0) for b, score in scores.items()}
               for system, scores in published.items()}
    return out


# (system folder, benchmark folder) -> rcp_review.decide's (source, release, passed, message)
Reviews = dict[tuple[str, str], tuple[str, str, bool | None, str]]


def judge_org(task: tuple[Path, str, str, int | None, bool, list[Path]]
              ) -> tuple[PackageVerdict, SummarizerScores, Reviews]:
    """As the review runs the tools: the package checker on a fresh copy, then the summarizer twice on it (in a
    worker process: with the engine's fast paths where the task's ``fast`` holds); then the RCP check with the
    round's table as the review ended (``rcp_review``; ``later``: the releases after)."""
    org, usage, ruleset, max_bytes, fast, later = task
    engine.start_worker(fast)
    try:
        with tempfile.TemporaryDirectory(prefix="mlrepro-official-") as scratch:
            copy = _copy(org, Path(scratch), max_bytes)
            verdict, scores = package_verdict(copy, usage, ruleset), summarizer_scores(copy, usage, ruleset)
            return verdict, scores, _reviews(copy, usage, ruleset, later)
    except Exception as e:  # e.g. the scratch copy fails: this organisation's verdict, not the audit's end
        why = f"the official tools could not be run on a copy: {type(e).__name__}: {e}"
        verdict = PackageVerdict()
        verdict.error(why)
        return verdict, SummarizerScores(crash=why), {}


def _reviews(copy: Path, usage: str, ruleset: str, later: list[Path]) -> Reviews:
    """``rcp_review.decide`` for every closed benchmark folder of the copy that the RCP check applies to."""
    from mlrepro.core import versions

    judge = versions.current()
    out: Reviews = {}
    for org in discover.find_orgs(copy) if judge is not None else []:
        for system in org.systems:
            try:
                division = json.loads((org.path / "systems" / f"{system.name}.json").read_text())["division"]
            except (OSError, ValueError, KeyError, TypeError):  # the package checker's verdict says why
                continue
            for bdir in system.benchmarks:
                if not rcp.applies(ruleset, division, bdir.name) or not bdir.result_files:
                    continue
                bypass = package.recorded_bypass(system.path, bdir.path, "rcp-bypass")
                try:
                    out[system.name, bdir.name] = rcp_review.decide(bdir, usage, ruleset, judge.folder, later, bypass)
                except Exception as e:  # e.g. a later table without this benchmark: the tag's verdict stands
                    out[system.name, bdir.name] = ("tag", judge.label, None,
                                                   f"the later tables could not be applied: {type(e).__name__}: {e}")
    return out


def _scores(result: Any) -> tuple[dict[str, float], dict[str, float]]:
    """(minutes, joules) by benchmark from what ``_compute_strong_scaling_scores`` returns, by release:
    1.x-3.x the scores; 4.0-5.1 (scores, energies); from 6.0 (scores, detailed scores with
    "<benchmark>:time_to_train" and ":Energy"), where 6.0.0-rc6 fills the scores with the RCP factor
    instead of the time, so the detailed time to train is taken wherever a release gives one."""
    scores, extra = (_numbers(result[0]), _numbers(result[1])) if isinstance(result, tuple) else (_numbers(result), {})
    if not any(":" in key for key in extra):  # 4.0-5.1: energies by benchmark
        return scores, extra
    times = {k.removesuffix(":time_to_train"): v for k, v in extra.items() if k.endswith(":time_to_train")}
    return times, {k.removesuffix(":Energy"): v for k, v in extra.items() if k.endswith(":Energy")}


def _numbers(scores: dict[str, Any]) -> dict[str, float]:
    """The entries of a summarizer's score dict that hold a number (it fills the others with None or NaN)."""
    out = {}
    for key, value in scores.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if not math.isnan(number):
            out[key] = number
    return out


def judge_orgs(orgs: list[Path], usage: str, ruleset: str, max_bytes: int | None, jobs: int, fast: bool = True,
               later: list[Path] | None = None) -> dict[Path, tuple[PackageVerdict, SummarizerScores, Reviews]]:
    """``judge_org`` for every organisation, over ``jobs`` processes."""
    def size(org: Path) -> int:
        return sum(f.stat().st_size for f in org.rglob("*") if f.is_file() and not f.is_symlink())

    # the largest organisations first, so that one is not left for the end while the other workers idle
    order = sorted(orgs, key=size, reverse=True)
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(order)))) as pool:
        tasks = [(org, usage, ruleset, max_bytes, fast, later or []) for org in order]
        return dict(zip(order, pool.map(judge_org, tasks), strict=True))
