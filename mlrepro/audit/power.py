"""Energy to train, as ``result_summarizer`` computes it from a benchmark folder's power logs.

A result ``result_N.txt`` with power measurements has ``power/result_N/node_*.txt`` (node power
readings) and optionally ``sw_*.txt`` (interconnect estimates) beside it. The summarizer sums the
official per-file energies (``_compute_power_node``, ``_compute_power_sw``: joules over the run's
time to train) over those files, and scores the folder by the olympic mean of the energies of the
runs it scores, ranked by their times, times the folder's scaling factor. The same functions run
here on logs read through ``discover.read_entry`` and parsed by the official parser; where they
fail, the result gets a verdict instead of the summarizer's crash: above all a measurement window
of zero length (``power_measurement_stop`` at the time of ``power_measurement_start``), where the
summarizer divides by zero.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from mlperf_logging.result_summarizer import result_summarizer as rs

from mlrepro.audit import discover, engine

POWER = "power"


@dataclass(frozen=True)
class RunEnergy:
    joules: float | None
    problem: str = ""  # why there is none


def has_power(folder: Path) -> bool:
    """Whether the summarizer reads power logs for this benchmark folder (a ``power`` sub-folder)."""
    path = folder / POWER
    return path.is_dir() and not path.is_symlink()


def _loglines(path: Path, root: Path, ruleset: str, max_bytes: int | None) -> list:  # type: ignore[type-arg]
    loglines, _ = engine.parse(engine.log_lines(discover.read_entry(path, root, max_bytes), ruleset), ruleset)
    return loglines


def run_energy(folder: Path, result: Path, time_to_train_ms: float, ruleset: str, root: Path,
               max_bytes: int | None = discover.DEFAULT_MAX_FILE_MB << 20) -> RunEnergy:
    """The energy of one run (joules), from ``power/<result stem>/``."""
    logs = folder / POWER / result.stem
    nodes = sorted(logs.glob("node_*.txt"))
    if not nodes:  # the summarizer asserts there is at least one
        return RunEnergy(None, f"no {POWER}/{result.stem}/node_*.txt: the run has no power readings "
                               "(the official result_summarizer stops on an AssertionError)")
    total = 0.0
    for files, compute in ((nodes, rs._compute_power_node), (sorted(logs.glob("sw_*.txt")), rs._compute_power_sw)):
        for path in files:
            where = f"{POWER}/{result.stem}/{path.name}"
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # its notice of a missing stop line
                    total += float(compute(_loglines(path, root, ruleset, max_bytes), time_to_train_ms))
            except ZeroDivisionError:
                return RunEnergy(None, f"{where}: zero-length power measurement window (power_measurement_stop at the "
                                       "time of power_measurement_start): no energy can be computed (the official "
                                       "result_summarizer crashes here with ZeroDivisionError)")
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # EntryRejected is an OSError
                return RunEnergy(None, f"{where}: {type(e).__name__}: {e} (no energy)")
    return RunEnergy(total)


def folder_energy(times: list[float], energies: list[RunEnergy], dropped: int, max_dropped: int,
                  scaling_factor: float) -> tuple[float | None, str]:
    """The folder's energy score from its scored runs' times and energies (same order), as the summarizer's
    ``_index_olympic_average``; (None, why) where a run has none or too many runs are dropped."""
    broken = [e.problem for e in energies if e.joules is None]
    if broken:
        return None, broken[0]
    if dropped > max_dropped:
        return None, "too many runs are not scored"
    index = sorted(range(len(times)), key=times.__getitem__)
    mean = rs._index_olympic_average([e.joules for e in energies], index, dropped, max_dropped)
    if mean is None:
        return None, "no run left after the olympic drop"
    return float(mean) * scaling_factor, ""
