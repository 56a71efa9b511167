"""The audit's summarize step as the rules call it (the check step is ``check.check_round``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlrepro.audit import (
    consistency,
    discover,
    manifest,
    official,
    package,
    platform_names,
    rcp,
    rcp_review,
    result_ids,
    scoring,
    summary,
)
from mlrepro.audit.runfile import FileCheck, convergence_unit
from mlrepro.core import atomic, versions


def _relative(path: Path, root: Path) -> str:
    """A path as the audit shows it: relative to the audited root, never the auditing machine's."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _file_entry(path: Path, root: Path, rec: FileCheck | None, unreadable: str, unit: str) -> dict[str, Any]:
    """One result file's line of the report; ``unit``: what its epochs count (runfile.convergence_unit)."""
    where = _relative(path, root)
    if rec is None:
        return {"name": path.name, "path": where, "valid": False, "crash": "", "minutes": None, "scored": False,
                "status": "", "epochs": None, "epochs_unit": unit, "bs": None, "messages": [],
                "notes": [f"not audited: {unreadable}"], "sanity": []}
    return {"name": path.name, "path": where, "valid": rec.valid, "crash": rec.crash, "minutes": rec.minutes,
            "scored": rec.scored_minutes is not None, "status": rec.status,
            "epochs": None if rec.rcp_not_converged else rec.rcp_epochs, "epochs_unit": unit, "bs": rec.rcp_bs,
            "messages": rec.messages, "notes": rec.notes, "sanity": rec.sanity}


def _systems(org: discover.Org) -> list[discover.SystemDir]:
    """The system folders under results/, then the system JSONs without one: the published table
    has a row for every system JSON, so the audit shows one too (without scores)."""
    folders = {s.name for s in org.systems}
    return org.systems + [discover.SystemDir(p.stem, org.path / "results" / p.stem, [])
                          for p in discover.system_json_paths(org.path) if p.stem not in folders]


def summarize(root: Path, checks: dict[str, Any], usage: str, ruleset: str, manifest_sha256: str | None = None,
              published_ids: Path | None = None,
              max_bytes: int | None = discover.DEFAULT_MAX_FILE_MB << 20, jobs: int = 1,
              fast: bool = True, later: list[Path] | None = None) -> dict[str, Any]:
    """Package verdicts, scores and the summary rows of every organisation under ``root``;
    ``manifest_sha256``: the provenance manifest's hash published with a one-organisation package;
    ``published_ids``: the round's published result IDs (CSV org,system,id), checked against the derived ones;
    ``jobs``: processes for the official tools where a release of its own judges (``versions``), with the
    engine's fast paths where ``fast``; ``later``: the releases after the judging one, whose tables hold the
    RCPs of the review (``rcp_review``)."""
    records = {p: FileCheck.from_dict(d) for p, d in checks["files"].items()}
    orgs = discover.find_orgs(root)
    ids = result_ids.assign(orgs, root, ruleset, published_ids, max_bytes)
    id_of = {key: e.to_dict() for key, e in ids.by_system().items()}
    position = {key: i for i, key in enumerate(id_of)}
    # judged by a version's own folder (versions): its official package checker and summarizer decide
    judge = versions.current()
    judged_by = versions.label()
    judged = {} if judge is None else official.judge_orgs([o.path for o in orgs], usage, ruleset, max_bytes, jobs,
                                                          fast, later)
    # the consistency checks' duplicates are the round's: every result file against every other
    twins = consistency.duplicates({p: (consistency.place(p, root), records[p]) for p in discover.result_files(orgs)
                                    if p in records})
    names = _names(orgs, records)
    orgs_out = []
    rows = []
    for org in orgs:
        official_scores = None
        reviews: official.Reviews = {}
        try:
            if judge is None:
                verdict = package.check_package(org, records, usage, ruleset)
            else:
                verdict, official_scores, reviews = judged[org.path]
        except Exception as e:  # a case no check foresaw: one organisation's verdict, not the audit's end
            verdict = package.PackageVerdict()
            verdict.error(f"The package check failed on unexpected input: {type(e).__name__}: {e}")
        org_out: dict[str, Any] = {"name": org.name, "package": asdict(verdict), "systems": [],
                                   "provenance": manifest.verify(org.path, manifest_sha256, max_bytes).to_dict()}
        for system in _systems(org):
            desc = scoring.load_system_desc(org, system)
            division = (desc.desc or {}).get("division", "")
            benchmarks = []
            for bdir in system.benchmarks:
                try:
                    score = scoring.score_benchmark(bdir, records, division, usage, ruleset,
                                                    installed_release=judge is None)
                    if official_scores is not None:
                        scoring.apply_official(score, official_scores, system.name, judged_by)
                except Exception as e:  # as above, for one benchmark folder
                    score = scoring.BenchmarkScore(scoring.benchmark_alias(bdir.name), bdir.name, False, None,
                                                   len(bdir.result_files), 0,
                                                   f"scoring failed: {type(e).__name__}: {e}",
                                                   1.0, None)
                b = asdict(score)
                b["consistency"] = _consistency(org, system, bdir, desc.desc or {}, division, records, twins, names,
                                                root, ruleset, max_bytes)
                b["rcp_review"] = _rcp_review(bdir, records, division, ruleset, judge,
                                              reviews.get((system.name, bdir.name)))
                b["rcp"] = None if score.rcp is None else {**asdict(score.rcp), "label": score.rcp.summary_label}
                unit = convergence_unit(score.benchmark, ruleset)
                b["epochs_unit"] = unit
                b["files"] = [_file_entry(f, root, records.get(str(f)), checks["unreadable"].get(str(f), ""), unit)
                              for f in bdir.result_files]
                benchmarks.append(b)
            sys_out = {"folder": system.name, "desc": desc.desc, "specs": desc.specs, "desc_problem": desc.problem,
                       "benchmarks": benchmarks}
            org_out["systems"].append(sys_out)
            rows.append(summary.row(org_out, sys_out, usage, ruleset, id_of.get((org.name, system.name)),
                                    judged_by))
        orgs_out.append(org_out)
    # the published table's order; systems without a JSON (and so without an ID) after it
    rows.sort(key=lambda r: (position.get((r["org"], r["system_folder"]), len(position)), r["org"], r["system_folder"]))
    # The root by its name only, paths relative to it: the report and audit.json never show the
    # auditing machine's paths (the official checkers quote them in their messages).
    prefixes = tuple(dict.fromkeys(f"{p}/" for p in (root, root.absolute(), root.resolve())))
    return _without(prefixes, {"usage": usage, "ruleset": ruleset, "root": root.resolve().name, "orgs": orgs_out,
                               "rows": rows, "result_ids": ids.to_dict(), "mlperf_logging": judged_by,
                               "judge": None if judge is None else judge.to_dict(),
                               "seed_tables": summary.seed_tables(rows, usage, ruleset),
                               "category_tables": summary.category_tables(rows, usage, ruleset)})


def _names(orgs: list[discover.Org], records: dict[str, FileCheck]) -> platform_names.Names:
    """Every system of the round and the platforms each organisation's logs name (the consistency checks tell a
    system's own name from another system's by them)."""
    names = platform_names.Names()
    for org in orgs:
        # the systems with results, and those the organisation describes without any (a log may name one)
        described = [discover.SystemDir(p.stem, org.path / "results" / p.stem, []) for p in org.system_jsons]
        for system in {s.name: s for s in (*described, *org.systems)}.values():
            desc = scoring.load_system_desc(org, system).desc or {}
            names.add_system(platform_names.System.from_desc(org.name, system.name, desc))
        for system in org.systems:
            names.add_logged(org.name, (rec.submission["submission_platform"] for b in system.benchmarks
                                        for f in b.result_files if (rec := records.get(str(f))) is not None
                                        and "submission_platform" in rec.submission))
    return names


def _consistency(org: discover.Org, system: discover.SystemDir, bdir: discover.BenchmarkDir, desc: dict[str, Any],
                 division: str, records: dict[str, FileCheck], twins: dict[str, list[consistency.Finding]],
                 names: platform_names.Names, root: Path, ruleset: str, max_bytes: int | None) -> list[dict[str, Any]]:
    """The consistency checks' findings of one benchmark folder, one per fact."""
    findings = consistency.power_logs(bdir, root, ruleset, max_bytes)
    filed_under = platform_names.System.from_desc(org.name, system.name, desc)
    for f in bdir.result_files:
        rec = records.get(str(f))
        if rec is not None:
            findings += consistency.submission(filed_under, bdir.name, desc, f.name, rec, names)
            findings += consistency.init_time(division, ruleset, f.name, rec)
            findings += twins.get(str(f), [])
    return consistency.grouped(findings, len(bdir.result_files))


def _rcp_review(bdir: discover.BenchmarkDir, records: dict[str, FileCheck], division: str, ruleset: str,
                judge: versions.Judge | None, review: tuple[str, str, bool | None, str] | None
                ) -> dict[str, Any] | None:
    """Which release's RCP table decides the folder as the review ended (None where no RCP check applies)."""
    if division != "closed" or not rcp.applies(ruleset, division, bdir.name) or not bdir.result_files:
        return None
    bs = rcp_review.batch_size(bdir, records)
    if judge is None:  # the installed release judges with its own tables
        return rcp_review.Decision(bs, versions.label(), "installed release").to_dict()
    source, release, passed, message = review or ("tag", judge.label, None, "")
    return rcp_review.Decision(bs, release, source, passed, message).to_dict()


def _without(prefixes: tuple[str, ...], value: Any) -> Any:
    """``value`` with every occurrence of the ``prefixes`` removed from its strings."""
    if isinstance(value, str):
        for p in prefixes:
            value = value.replace(p, "")
        return value
    if isinstance(value, dict):
        return {k: _without(prefixes, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without(prefixes, v) for v in value]
    return value


def write_summary(audit: dict[str, Any], out_dir: Path) -> None:
    summary.write(audit["rows"], audit["usage"], audit["ruleset"], str(out_dir / "summary.csv"),
                  str(out_dir / "summary.json"))
    atomic.write_json(out_dir / "audit.json", audit)


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
