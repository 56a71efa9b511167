"""RCP verdicts of a benchmark folder from the per-file records, by ``rcp_checker``'s rules.

``rcp_checker.check_directory`` re-reads every file and may write or delete ``scaling.json`` in
the package. Here the per-file convergence data comes from the audit's single parse
(``runfile``), the reference data and its statistics from the official ``RCP_Checker``, and the
decision follows ``check_directory`` step by step; nothing is written into the package. What the
official check would leave in ``scaling.json`` (``set_scaling=True``, as the package checker and
result_summarizer call it) is read from a scratch folder the official code writes into instead.
"""

from __future__ import annotations

import functools
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mlperf_logging.rcp_checker import rcp_checker

from mlrepro.audit.runfile import FileCheck
from mlrepro.core import rulesets

_RCP_RULESETS = {"1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0", "5.0.0", "5.1.0",
                 "6.0.0", "6.1.0"}


@dataclass(frozen=True)
class RcpVerdict:
    passed: bool
    message: str  # check_directory's message, or why it could not run
    norm_factor: float  # the checker's ratio RCP mean / submission mean (1.0 when none); a score uses it only
    # where the check passes and the submission converges faster than the RCP mean: see written_factor
    error: str = ""  # the exception the official checker dies of here, if any
    # scaling.json as check_directory(set_scaling=True) leaves it: its factor, 1.0 where it deletes
    # the file, None where it leaves the package's file as it is
    written_factor: float | None = None

    @property
    def summary_label(self) -> str:
        """The RCP column of result_summarizer's detailed CSV ('' where it fails to compute one)."""
        if self.error:
            return ""
        if self.passed:
            return "Pass"
        if self.message == "RCP found":
            return "Fail"
        if self.message == "RCP Interpolation":
            return "Interp. Fail"
        if "Missing" in self.message:
            return "Missing"
        if self.message == "Cannot find any RCPs":
            return "No RCP"
        return "Unknown state"


def applies(ruleset: str, division: str, benchmark: str) -> bool:
    """Whether the package checker runs the RCP checker on this folder."""
    return ruleset in _RCP_RULESETS and division == "closed" and rulesets.rules(benchmark, ruleset).rcp


@functools.cache
def _reference(usage: str, ruleset: str, benchmark: str | None) -> rcp_checker.RCP_Checker:
    return rcp_checker.RCP_Checker(usage, ruleset, benchmark, False)


def submission_epochs(records: list[FileCheck]) -> tuple[Any, list[float] | None, str | None]:
    """``rcp_checker.get_submission_epochs`` (without bert_train_samples) over the records."""
    for rec in records:
        if rec.rcp_error:
            raise ValueError(f"the official RCP reader fails on a result file: {rec.rcp_error}")
    bs: Any = -1
    benchmark = None
    epochs = []
    not_converged = 0
    for rec in records:
        epochs.append(rec.rcp_epochs)
        not_converged += rec.rcp_not_converged
        if bs == -1:
            bs = rec.rcp_bs
        elif rec.rcp_bs != bs:
            return -1, None, None
        if benchmark is None:
            benchmark = rec.rcp_benchmark
        elif rec.rcp_benchmark != benchmark:
            return -1, None, None
    if not_converged > rulesets.rules(benchmark or "").dropped:
        return bs, None, benchmark
    return bs, epochs, benchmark


def mean_epochs(records: list[FileCheck]) -> float | None:
    """result_summarizer's samples_to_converge: the mean without the lowest and highest value."""
    try:
        _, epochs, _ = submission_epochs(records)
        if not epochs or len(epochs) < 3:
            return None
        return float(np.mean(sorted(epochs)[1:-1]))
    except (ValueError, TypeError):  # unreadable or non-numeric epochs: the summarizer prints none
        return None


def check(records: list[FileCheck], usage: str, ruleset: str, bypass: bool = False) -> RcpVerdict:
    """``check_directory(..., rcp_pass='pruned_rcps', rcp_bypass=bypass)`` on one benchmark folder."""
    try:
        bs, epochs, benchmark = submission_epochs(records)
        checker = _reference(usage, ruleset, benchmark)
    except Exception as e:
        name = type(e).__name__
        why = {"KeyError": f"the RCP checker of {ruleset} has no submission count for benchmark {e}",
               "FileNotFoundError": f"the RCP checker of {ruleset} has no RCP file for this benchmark"}
        return RcpVerdict(False, why.get(name, str(e)), 1.0, f"{name}: {e}")
    if bs == -1:
        return RcpVerdict(False, "Could not detect global_batch_size", 1.0)
    if epochs is None:
        return RcpVerdict(False, "Insufficient convergence", 1.0)
    try:
        passed, msg, norm, written = _decide(checker, bs, list(epochs))
    except Exception as e:  # a batch size or epoch count of the wrong type, from a hostile log
        return RcpVerdict(False, f"the RCP checker fails on these logs: {type(e).__name__}: {e}", 1.0,
                          f"{type(e).__name__}: {e}")
    if bypass and not passed and msg in ("RCP found", "RCP Interpolation",
                                         f"Missing RCP, please submit RCP with BS = {bs}"):
        return RcpVerdict(True, msg + " passed using rcp_bypass", norm, written_factor=written)
    return RcpVerdict(passed, msg, norm, written_factor=written)


def _decide(checker: rcp_checker.RCP_Checker, bs: Any, epochs: list[float]) -> tuple[bool, str, float, float | None]:
    """(passed, message, norm factor, what scaling.json holds afterwards) as check_directory decides."""
    norm = 1.0
    # _eval_submission_record removes (and may write) scaling.json in the folder it is given:
    # give it a scratch folder, never the package, and read back what it left there.
    with tempfile.TemporaryDirectory(prefix="mlrepro-rcp-") as scratch:

        def evaluate(record: Any) -> tuple[bool, float, float]:
            passed, factor = checker._eval_submission_record(record, epochs, scratch)
            path = Path(scratch) / "scaling.json"
            written = float(json.loads(path.read_text())["scaling_factor"]) if path.is_file() else 1.0
            return bool(passed), float(factor), written

        record = checker._find_rcp(bs, "pruned_rcps")
        if record is not None:
            passed, norm, written = evaluate(record)
            return passed, "RCP found", norm, written
        low = checker._find_top_min_rcp(bs, "pruned_rcps")
        high = checker._find_bottom_max_rcp(bs, "pruned_rcps")
        if low is not None and high is not None:
            _, interp = checker._create_interp_rcp(bs, low, high)
            passed, norm, written = evaluate(interp)
            return passed, "RCP Interpolation", norm, written
        if low is not None:
            return False, f"Missing RCP, please submit RCP with BS = {bs}", norm, None
        if high is not None:
            passed, norm, written = evaluate(checker._find_min_rcp("pruned_rcps"))
            if not passed:
                return False, f"Missing RCP, please submit RCP with BS = {bs}", norm, written
            return True, "RCP not found but slower convergence on smaller batch size", norm, written
        return False, "Cannot find any RCPs", norm, None
