"""Finished results are verified by hash before they are used again.

The run step records the sha256 of ``result.txt`` in ``run.json`` (``result_sha256``) when the
run finishes; the gate, the package, the score and the report check it before reading the result.
The package step records the hash of every file of the submission tree it wrote
(``package_check.json``'s ``files``), so that an edited, added or removed package file is found too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file

RESULT = "result.txt"
SUMMARY = "run.json"
# Snakemake's marker in a directory output: written after the step, not part of what it made.
_NOT_OURS = {".snakemake_timestamp"}


class Tampered(MlreproError, RuntimeError):
    """A finished file no longer matches the hash recorded when it was written."""


def result_problem(result: Path, summary: Path | None = None) -> str | None:
    """What is wrong with ``result`` against the hash its run recorded (None: it matches).

    ``summary`` defaults to the ``run.json`` beside the result (the pipeline's run folder).
    """
    summary = summary or result.with_name(SUMMARY)
    try:
        recorded = json.loads(summary.read_text(encoding="utf-8")).get("result_sha256")
    except (OSError, ValueError, AttributeError) as e:
        return f"{summary}: cannot read the run's record ({type(e).__name__}: {e})"
    if not recorded:
        return f"{summary}: records no result_sha256 (written by an older mlrepro); run the run again"
    if not result.is_file():
        return f"{result}: missing (its run recorded sha256 {recorded[:12]}...)"
    actual = sha256_file(result)
    if actual != recorded:
        return (f"{result}: changed since its run finished (sha256 {actual[:12]}..., the run recorded "
                f"{recorded[:12]}... in {summary})")
    return None


def verify_results(results: Iterable[Path]) -> None:
    """Raise Tampered naming every result that does not match its run's recorded hash."""
    problems = [p for r in results if (p := result_problem(Path(r)))]
    if problems:
        raise Tampered("finished results do not match the hashes recorded when their runs finished:\n"
                       + "\n".join(f"  {p}" for p in problems)
                       + "\nRestore them, or delete their run folders to run them again.")


def tree_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by path relative to it (symlinks are not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(set(filenames) - _NOT_OURS):
            path = Path(dirpath, name)
            rel = path.relative_to(folder).as_posix()
            out[rel] = "symlink:" + os.readlink(path) if path.is_symlink() else sha256_file(path)
    return out


def tree_problems(folder: Path, recorded: dict[str, str]) -> list[str]:
    """Every file of ``folder`` that was changed, added or removed since ``recorded`` was taken."""
    if not folder.is_dir():
        return [f"{folder}: missing"]
    actual = tree_hashes(folder)
    problems = [f"{folder / rel}: missing" for rel in sorted(recorded.keys() - actual.keys())]
    problems += [f"{folder / rel}: not written by the package step" for rel in sorted(actual.keys() - recorded.keys())]
    problems += [f"{folder / rel}: changed" for rel in sorted(recorded.keys() & actual.keys())
                 if recorded[rel] != actual[rel]]
    return problems
