"""The audit tests' verification, ours: what each round's ``run_verification.py`` decides (mlcommons/inference
compliance/ at the round's commit), written for the files LoadGen writes, each verdict with the text the
official scripts print and the pass line (``TEST PASS``) the round's checker looks for.

- TEST01 accuracy (both rounds' ``verify_accuracy.py``): every response the performance run logged equals the
  accuracy run's for the same sample, comparing the first element of the bytes read as the response's type
  (later duplicates against the latest). v6.1 also needs one sample in common.
- TEST01 and TEST05 performance at v2.0 (``verify_performance.py``): the summary's result within 10% (TEST05: 5%)
  of the submission's, both VALID; SingleStream results of 0.2 ms or less (and for TEST01 MultiStream ones of
  1.6 ms or less) within 20%. v2.0's script reads "90th percentile latency"; LoadGen 6.0 prints "90.0th": the
  same line, read here in both forms (the official script finds no result in it and fails).
- TEST01 performance at v6.1: the detail logs' result keys, bounds inclusive, and the Server latency bound equal.
- TEST04 at v2.0 (``verify_test4_performance.py``): TEST04-B (one sample again and again) within 10% of TEST04-A
  (unique samples), or slower; at v6.1 (TEST04 ``verify_performance.py``): TEST04's result no more than 10%
  above the submission's (SingleStream and MultiStream as 1e9 / the early-stopping estimate, threshold 20%).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlrepro.inference import summary

PASS, FAIL = "TEST PASS", "TEST FAIL"
# How each of our models logs a response (mlrepro/inference/serve.py and models/): run_verification's --dtype
DTYPES = {"resnet": "int32", "dlrm": "float32", "ssd": "float32", "bert": "int32", "rnnt": "int64", "unet3d": "byte"}
_NUMPY = {"byte": np.byte, "float32": np.float32, "int32": np.int32, "int64": np.int64}


@dataclass
class Verdict:
    passed: bool
    text: str  # what the official script prints: the file the checker reads

    def __bool__(self) -> bool:
        return self.passed


def _done(lines: list[str], passed: bool, fail: str = FAIL) -> Verdict:
    return Verdict(passed, "\n".join([*lines, PASS if passed else fail]) + "\n")


def accuracy(accuracy_log: Path, test_log: Path, dtype: str, need_match: bool) -> Verdict:
    """TEST01's accuracy check: the accuracy run's log against the audit run's."""
    kind = _NUMPY[dtype]
    acc, perf = json.loads(accuracy_log.read_text()), json.loads(test_log.read_text())
    seen: dict[int, str] = {}
    duplicates = data_mismatch = matched = mismatched = missing = 0
    for sample in acc:
        idx, data = sample["qsl_idx"], sample["data"]
        if idx in seen:
            duplicates += 1
            data_mismatch += seen[idx] != data
        else:
            seen[idx] = data
    for sample in perf:
        idx = sample["qsl_idx"]
        if idx in seen:
            matched += 1
            mine = np.frombuffer(bytes.fromhex(sample["data"]), kind)
            theirs = np.frombuffer(bytes.fromhex(seen[idx]), kind)
            mismatched += (mine.size != theirs.size) if 0 in (mine.size, theirs.size) else bool(mine[0] != theirs[0])
        else:
            missing += 1
        seen[idx] = sample["data"]
    lines = [f"num_acc_log_entries = {len(acc)}", f"num_acc_log_duplicate_keys = {duplicates}",
             f"num_acc_log_data_mismatch = {data_mismatch}", f"num_perf_log_entries = {len(perf)}",
             f"num_perf_log_qsl_idx_match = {matched}", f"num_perf_log_data_mismatch = {mismatched}",
             f"num_missing_qsl_idxs = {missing}"]
    return _done(lines, mismatched == 0 and (matched > 0 or not need_match))


# v2.0's verify_performance.py: the result line per scenario (ours reads LoadGen 6.0's "90.0th" as "90th")
_V2_RESULT = {"SingleStream": r"90(?:\.0+)?th percentile latency", "MultiStream": r"99(?:\.0+)?th percentile latency",
              "Server": r"Scheduled samples per second", "Offline": r"Samples per second"}


def _summary_result(path: Path, patterns: dict[str, str], inverse: bool = False) -> tuple[str, float, bool]:
    """(scenario, the last result line's value, "Result is" not INVALID) as the official scripts read a summary;
    ``inverse``: SingleStream and MultiStream as 1e9 / the value (v6.1's TEST04)."""
    scenario, score, valid = "", 0.0, True
    for line in path.read_text(errors="replace").splitlines():
        if re.match("Scenario", line):
            scenario = line.split(": ", 1)[1].strip()
        elif scenario in patterns and re.match(patterns[scenario], line):
            value = float(line.split(": ", 1)[1].strip())
            score = 1e9 / value if inverse and scenario in ("SingleStream", "MultiStream") else value
        elif re.match("Result is", line):
            valid = line.split(": ", 1)[1].strip() != "INVALID"
    return scenario, score, valid


def _within(ref: float, test: float, threshold: float, inclusive: bool) -> bool:
    low, high = ref * (1 - threshold), ref * (1 + threshold)
    return low <= test <= high if inclusive else low < test < high


def performance_summary(reference: Path, test: Path, threshold: float, multistream_relaxed: bool) -> Verdict:
    """v2.0's TEST01 (threshold 0.10, MultiStream relaxed) and TEST05 (0.05) performance check."""
    ref_scenario, ref, ref_valid = _summary_result(reference, _V2_RESULT)
    if not ref_valid:
        return Verdict(False, "TEST FAIL: Reference results are invalid\n")
    test_scenario, score, test_valid = _summary_result(test, _V2_RESULT)
    if not test_valid:
        return Verdict(False, "TEST FAIL: Test results are invalid\n")
    if test_scenario != ref_scenario:
        return Verdict(False, "Test and reference scenarios do not match!\n")
    if (ref_scenario == "SingleStream" and ref <= 200000) or (
            multistream_relaxed and ref_scenario == "MultiStream" and ref <= 1600000):
        threshold = 0.20
    return _done([f"reference score = {ref:g}", f"test score = {score:g}"], _within(ref, score, threshold, False),
                 "TEST FAIL: Test score invalid")


# v6.1's TEST01 verify_performance.py reads the detail logs' result keys
_V6_RESULT = {"Offline": "result_samples_per_second", "SingleStream": "early_stopping_latency_ss",
              "MultiStream": "early_stopping_latency_ms", "Server": "result_completed_samples_per_sec"}


def performance_detail(reference: Path, test: Path) -> Verdict:
    """v6.1's TEST01 performance check."""
    found = []
    for path in (reference, test):
        d = summary.detail(path)
        scenario = str(d.get("effective_scenario"))
        if d.get("result_validity") != "VALID":
            return Verdict(False, f"TEST FAIL: Invalid results in {path.name}\n")
        found.append((scenario, float(d[_V6_RESULT[scenario]]), d.get("effective_target_latency_ns")))
    (ref_scenario, ref, ref_bound), (test_scenario, score, test_bound) = found
    if test_scenario != ref_scenario:
        return Verdict(False, "TEST FAIL: Test and reference scenarios do not match!\n")
    if ref_scenario == "Server" and test_bound != ref_bound:
        return Verdict(False, "TEST FAIL: Server target latency mismatch\n")
    threshold = 0.20 if ((ref_scenario == "SingleStream" and ref <= 200000)
                         or (ref_scenario == "MultiStream" and ref <= 1600000)) else 0.10
    return _done([f"Reference score = {ref}", f"Test score = {score}"], _within(ref, score, threshold, True),
                 "TEST FAIL: Test score invalid")


def _issue_setting(path: Path, key: str) -> str:
    m = re.search(rf"^{key}\s*:\s*(\S+)", path.read_text(errors="replace"), re.M)
    return m.group(1) if m else ""


def test04_unique_same(unique: Path, same: Path) -> Verdict:
    """v2.0's TEST04: TEST04-B (``same``) against TEST04-A (``unique``), summaries."""
    if _issue_setting(unique, "performance_issue_unique") in ("false", "0"):
        return Verdict(False, "TEST FAIL: Invalid test settings in TEST04-A summary.\n")
    if _issue_setting(same, "performance_issue_same") in ("false", "0"):
        return Verdict(False, "TEST FAIL: Invalid test settings in TEST04-B summary.\n")
    ref_scenario, ref, _ = _summary_result(unique, _V2_RESULT)
    scenario, score, _ = _summary_result(same, _V2_RESULT)
    if scenario != ref_scenario:
        return Verdict(False, "Test and reference scenarios do not match!\n")
    threshold = 0.20 if scenario == "SingleStream" and ref <= 200000 else 0.10
    lines = [f"TEST04-A score = {ref:g}", f"TEST04-B score = {score:g}"]
    if _within(ref, score, threshold, False):
        return _done(lines, True)
    # a latency above A's, or a throughput below it: B is slower, which caching cannot explain
    slower = score > ref if scenario == "SingleStream" else score < ref
    return _done([*lines, *(["Note: TEST04-B is significantly slower than TEST04-A"] if slower else [])], slower,
                 "TEST FAIL: Test score invalid")


# v6.1's TEST04 verify_performance.py: SingleStream and MultiStream compared as 1e9 / the early-stopping estimate
_V6_TEST04 = {"SingleStream": r".*Early stopping (90th|90.0th|99.9th) percentile estimate",
              "MultiStream": r".*Early stopping (99th|99.0th) percentile estimate",
              "Server": r"Completed samples per second", "Offline": r"Samples per second"}


def test04_same(reference: Path, test: Path) -> Verdict:
    """v6.1's TEST04: the audit run (one sample again and again) no faster than 10% above the submission."""
    ref_scenario, ref, ref_valid = _summary_result(reference, _V6_TEST04, inverse=True)
    if not ref_valid:
        return Verdict(False, "TEST FAIL: Reference results are invalid\n")
    scenario, score, valid = _summary_result(test, _V6_TEST04, inverse=True)
    if not valid:
        return Verdict(False, "TEST FAIL: Test results are invalid\n")
    if scenario != ref_scenario:
        return Verdict(False, "Test and reference scenarios do not match!\n")
    # as the official script: its 0.2 ms latency relaxation compares the inverted value (a rate) with 200000
    threshold = 0.20 if (scenario == "SingleStream" and ref <= 200000) or (
        scenario == "MultiStream" and ref <= 1600000) else 0.10
    return _done([f"reference score = {ref}", f"test score = {score}"], score < ref * (1 + threshold),
                 "TEST FAIL: Test score invalid")
