"""Everything the audit needs from one result file, from a single read and parse.

The compliance verdict comes from the official engine (``engine``); time to train follows
``result_summarizer._query_run_start_stop``; epochs/samples to converge, batch size and convergence
follow ``rcp_checker.read_submission_file``; seed records follow ``SeedChecker._get_seed_records``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import traceback
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any

from mlperf_logging.compliance_checker import mlp_compliance

from mlrepro.audit import engine

# The audit's own notes quote log lines; a hostile line could be megabytes long.
MAX_MESSAGE = 2_000
# read_submission_file's families of benchmarks whose convergence point is a sample count.
_UNSET = object()
_SAMPLES_BENCHMARKS = {"llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b",
                       "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4"}


# logged by some implementations beside the submission_* lines; compared with the system description
_COUNT_KEYS = ("number_of_nodes", "accelerators_per_node")


def convergence_unit(benchmark: str, ruleset: str) -> str:
    """What ``rcp_epochs`` counts for a benchmark (folder name or alias): "epochs", "samples" or "steps".

    bert logs its ``epoch_num`` as training samples; the families above log ``samples_count``, and
    stable_diffusion its step count in 3.1.0 and samples otherwise."""
    if benchmark == "stable_diffusion":
        return "steps" if ruleset == "3.1.0" else "samples"
    return "samples" if benchmark in _SAMPLES_BENCHMARKS or benchmark == "bert" else "epochs"


@dataclass
class FileCheck:
    """The audit of one result file; content-addressed, so it holds nothing about its path."""

    sha256: str
    size: int
    valid: bool  # the official compliance verdict
    messages: list[str] = field(default_factory=list)  # exactly the official checker's messages
    crash: str = ""  # the exception the official checker would die of, if any
    notes: list[str] = field(default_factory=list)  # the audit's own findings (parse errors, ...)
    # the audit's sanity checks of the timeline: warnings beside the official verdict, never changing it
    sanity: list[str] = field(default_factory=list)
    parse_errors: int = 0
    # result_summarizer: the run counts when valid, parsed without errors and timed
    run_start_ms: float | None = None
    run_stop_ms: float | None = None
    init_start_ms: float | None = None  # the first init_start: initialisation time is run_start - init_start
    minutes: float | None = None
    status: str = ""  # run_stop metadata.status
    # submission_* values (first of each), and the node and accelerator counts where a log states them
    submission: dict[str, Any] = field(default_factory=dict)
    # rcp_checker.read_submission_file
    rcp_not_converged: int = 1
    rcp_epochs: float = 1e9
    rcp_bs: Any = -1
    rcp_benchmark: str | None = None
    rcp_error: str = ""
    # SeedChecker._get_seed_records: (file, lineno, seed) or the error it raises
    seeds: list[list[Any]] = field(default_factory=list)
    seed_error: str = ""

    @property
    def scored_minutes(self) -> float | None:
        """The run's minutes as result_summarizer counts them; None is a dropped run."""
        return self.minutes if self.valid and not self.parse_errors else None

    def to_dict(self) -> dict[str, Any]:
        # The fields hold JSON values, no dataclasses: what asdict gives, without its deep copy.
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileCheck:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def _cut(text: str) -> str:
    if len(text) <= MAX_MESSAGE:
        return text
    return text[:MAX_MESSAGE] + f"\n[... {len(text) - MAX_MESSAGE} more characters]"


def _describe(e: BaseException) -> str:
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" (in {where.name}, {where.filename.rsplit('/', 1)[-1]}:{where.lineno})" if where else ""
    return f"{type(e).__name__}: {e}{at}"


def audit_bytes(data: bytes, usage: str, ruleset: str, sha256: str | None = None) -> FileCheck:
    """Check one result file's bytes (``sha256``: their digest, where the caller has it already).
    Never raises for bad content: it becomes the verdict."""
    rec = FileCheck(sha256=sha256 or hashlib.sha256(data).hexdigest(), size=len(data), valid=False)
    lines = engine.log_lines(data, ruleset)
    try:
        loglines, failed = engine.parse(lines, ruleset)
    except Exception as e:  # the official parser dies on e.g. a JSON line without "key"
        rec.crash = _describe(e)
        rec.notes.append(f"The official compliance checker crashes on this file: {rec.crash}")
        rec.seed_error = str(e)  # SeedChecker re-parses the file and reports the same exception
        _rcp_read(rec, lines, ruleset)
        return rec
    rec.parse_errors = len(failed)
    checker = mlp_compliance.make_checker(usage, ruleset, False, False)
    try:
        rec.valid = engine.run_checker(checker, loglines, failed, usage, ruleset)
    except Exception as e:  # e.g. FileNotFoundError for a benchmark the ruleset lacks
        rec.crash = _describe(e)
    rec.messages = engine.messages(checker)
    rec.notes += [_cut(f"Parse error ({err}) in line: {line}") for line, err in failed]
    if rec.crash:
        rec.valid = False
        rec.notes.append(f"The official compliance checker crashes on this file: {rec.crash}")
    _timing(rec, loglines)
    rec.sanity = sanity_warnings(loglines, rec.run_start_ms, rec.run_stop_ms)
    for ll in loglines:
        # a key may be any JSON value: the official checker skips a line whose key is not a name
        if isinstance(ll.key, str) and (ll.key.startswith("submission_") or ll.key in _COUNT_KEYS) \
                and ll.key not in rec.submission:
            rec.submission[ll.key] = ll.value.get("value")
    _rcp_read(rec, lines, ruleset)
    _seeds(rec, loglines, failed)
    return rec


def _timing(rec: FileCheck, loglines: list[Any]) -> None:
    # _query_run_start_stop: the last value seen before both keys have appeared
    start = stop = None
    for ll in loglines:
        if ll.key == "init_start" and rec.init_start_ms is None and start is None:
            with contextlib.suppress(TypeError, ValueError):
                rec.init_start_ms = float(ll.timestamp)
        if ll.key == "run_start":
            start = ll.timestamp
        if ll.key == "run_stop":
            stop = ll.timestamp
            if not rec.status and isinstance(ll.value.get("metadata"), dict):
                rec.status = str(ll.value["metadata"].get("status", ""))
        if start is not None and stop is not None:
            break
    if start is None or stop is None:
        rec.notes.append(f"No {'run_start' if start is None else 'run_stop'} in the log: the run has no time to train.")
        return
    rec.run_start_ms, rec.run_stop_ms = float(start), float(stop)
    rec.minutes = (float(stop) - float(start)) / 60 / 1000


def sanity_warnings(loglines: list[Any], start_ms: float | None, stop_ms: float | None) -> list[str]:
    """What makes a timeline impossible although the official checkers accept it.

    Negative or zero time to train (from the run_start and run_stop the score uses), run_stop before
    run_start, a time going backwards, an eval after run_stop, a repeated run_start or run_stop.
    """
    found: list[str] = []
    if start_ms is not None and stop_ms is not None and stop_ms - start_ms <= 0:
        found.append(f"The time to train is {'zero' if stop_ms == start_ms else 'negative'}: run_stop at "
                     f"{stop_ms:.0f} ms, run_start at {start_ms:.0f} ms.")
    starts = [ll for ll in loglines if ll.key == "run_start"]
    stops = [ll for ll in loglines if ll.key == "run_stop"]
    for key, lines in (("run_start", starts), ("run_stop", stops)):
        if len(lines) > 1:
            found.append(f"{len(lines)} {key} lines (:::MLLOG lines {', '.join(str(ll.lineno + 1) for ll in lines[:5])}"
                         f"{', ...' if len(lines) > 5 else ''}).")
    if starts and stops:
        start, stop = starts[0], stops[0]
        if stop.lineno < start.lineno:
            found.append(f"run_stop (:::MLLOG line {stop.lineno + 1}) comes before run_start "
                         f"(:::MLLOG line {start.lineno + 1}).")
        late = [ll for ll in loglines if ll.key in ("eval_accuracy", "eval_error") and ll.lineno > stop.lineno]
        if late:
            found.append(f"{len(late)} {late[0].key} line(s) after run_stop "
                         f"(first at :::MLLOG line {late[0].lineno + 1}).")
    backwards = []
    previous = None
    for ll in loglines:
        try:
            t = float(ll.timestamp)
        except (TypeError, ValueError):
            continue
        if previous is not None and t < previous[0]:
            backwards.append((ll, previous))
        previous = (t, ll)
    if backwards:
        ll, (_, before) = backwards[0]
        found.append(f"Time goes backwards {len(backwards)} time(s); first at :::MLLOG line {ll.lineno + 1} "
                     f"({ll.key} at {ll.timestamp} ms after {before.key} at {before.timestamp} ms).")
    return [_cut(f) for f in found]


def _rcp_read(rec: FileCheck, lines: list[str], ruleset: str) -> None:
    """rcp_checker.read_submission_file over the same lines (use_train_samples=False)."""
    token = engine.parser_module(ruleset).TOKEN
    not_converged, subm_epochs, bs, benchmark = 1, 1e9, -1, None
    sd_results: dict[Any, dict[Any, Any]] = defaultdict(dict)
    conv_epoch: Any = _UNSET
    try:
        for line in lines:
            if not line.startswith(token):
                continue
            s = line[len(token):]
            if "global_batch_size" in s:
                bs = json.loads(s)["value"]
            if "submission_benchmark" in s:
                benchmark = json.loads(s)["value"]
            if benchmark == "stable_diffusion" and ("eval_error" in s or "eval_accuracy" in s):
                step_unit = "step_num" if ruleset in ["3.1.0"] else "samples_count"
                j = json.loads(s)
                sd_results[j["metadata"][step_unit]][j["metadata"]["metric"]] = j["value"]
            elif benchmark in _SAMPLES_BENCHMARKS and ("eval_error" in s or "eval_accuracy" in s):
                conv_epoch = json.loads(s)["metadata"]["samples_count"]
            elif "eval_error" in s or "eval_accuracy" in s:
                conv_epoch = round(json.loads(s)["metadata"]["epoch_num"], 3)
            if "run_stop" in s and json.loads(s)["key"] == "run_stop":
                if json.loads(s)["metadata"]["status"] == "success":
                    not_converged = 0
                    if benchmark == "stable_diffusion":
                        conv_epoch = min(step for step, r in sd_results.items()
                                         if r["FID"] <= 90.0 and r["CLIP"] >= 0.15)
                    if conv_epoch is _UNSET:  # the official reader dies of an UnboundLocalError here
                        raise ValueError("run_stop with status success before any eval_accuracy line")
                    subm_epochs = conv_epoch
                else:
                    not_converged, subm_epochs = 1, 1e9
    except Exception as e:  # the official RCP checker dies on the same line
        rec.rcp_error = _describe(e)
    rec.rcp_not_converged, rec.rcp_epochs, rec.rcp_bs, rec.rcp_benchmark = not_converged, subm_epochs, bs, benchmark


def _seeds(rec: FileCheck, loglines: list[Any], failed: list[engine.ParseError]) -> None:
    if failed:
        rec.seed_error = "\n".join(["Found parsing errors:"] + [f"{line}\n  ^^  {err}" for line, err in failed]
                                   + ["", "Log lines had parsing errors."])
        return
    try:
        rec.seeds = [[ll.value["metadata"]["file"], ll.value["metadata"]["lineno"], int(ll.value["value"])]
                     for ll in loglines if ll.key == "seed"]
    except Exception as e:
        rec.seed_error = str(e)
