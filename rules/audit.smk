# Audit mode: `snakemake --cores all --config audit=PATH ruleset=1.1.0 audit_out=DIR`.
# PATH is one organisation (<org>/results/...) or a whole round; everything lands under DIR.
#   audit_check: every result file through the official compliance engine (process pool, cache)
#   audit_summarize: package verdicts, RCPs and scores per organisation -> summary.csv/.json and
#                    the HTML report (seed-document tables, scores, verdicts, a page per system);
#                    audit_result_ids=CSV (org,system,id): the round's published result IDs
#   audit_logging=DIR: judge by the round's own mlperf-logging (a checkout or pip --target folder per tag);
#   audit_logging_compare=DIR|installed: by a second release too (rules_changed.json/.csv/.html)
from pathlib import Path

from snakemake.exceptions import WorkflowError

from mlrepro.core import release_table, rulesets
from mlrepro.audit import discover
from mlrepro.core import smk as _smk
AUDIT_ROOT = Path(config["audit"]).resolve()
AUDIT_OUT = Path(config.get("audit_out") or "audit")
AUDIT_USAGE = str(config.get("usage") or "training")
AUDIT_RULESET = str(config.get("ruleset") or "2.0.0")

if AUDIT_RULESET not in rulesets.known_rulesets(AUDIT_USAGE) and not release_table.pinned(AUDIT_RULESET, AUDIT_USAGE):
    raise WorkflowError(f"ruleset={AUDIT_RULESET}: mlperf_logging knows {', '.join(rulesets.known_rulesets(AUDIT_USAGE))}")
if not AUDIT_ROOT.is_dir():
    raise WorkflowError(f"audit={config['audit']}: not a folder")
if AUDIT_OUT.resolve().is_relative_to(AUDIT_ROOT):
    raise WorkflowError(f"audit_out={AUDIT_OUT} lies inside the audited package {AUDIT_ROOT}; choose another folder")
if AUDIT_ROOT.is_relative_to(AUDIT_OUT.resolve()):  # the audit replaces what it writes there: the package too
    raise WorkflowError(f"audit_out={AUDIT_OUT} ({AUDIT_OUT.resolve()}) holds the audited package {AUDIT_ROOT}; choose "
                        "a folder that neither lies inside the package nor holds it")

# Enumerated at parse time, so that a changed, added or removed file re-runs what depends on it;
# the content-hash cache then re-checks only the files whose bytes changed.
# Only regular files inside the package are inputs: a dangling symlink, a FIFO or a device must
# neither stop Snakemake nor be opened; those entries get their own verdicts in the audit.
AUDIT_MAX_BYTES = int(float(config.get("audit_max_file_mb") or discover.DEFAULT_MAX_FILE_MB) * (1 << 20))
# Names that are not UTF-8 reach Snakemake as their nearest UTF-8 folder, and the rejected entries escaped:
# Snakemake records both as UTF-8 text.
AUDIT_RESULT_FILES = _smk.utf8_paths([f for f in discover.result_files(discover.find_orgs(AUDIT_ROOT))
                                          if discover.entry_problem(Path(f), AUDIT_ROOT, AUDIT_MAX_BYTES) is None],
                                         AUDIT_ROOT)
AUDIT_ALL_FILES = _smk.utf8_paths(discover.input_files(AUDIT_ROOT), AUDIT_ROOT)
AUDIT_REJECTED = [e.encode("utf-8", "backslashreplace").decode() for e in
                  discover.rejected_entries(AUDIT_ROOT, AUDIT_MAX_BYTES)]


# A rule without a message is announced with every input file: a package of 100,000 files made an 8 MB log.
# Counts only, no names: Snakemake formats the message ({...}), and a name may hold braces.
AUDIT_MESSAGE = f"{len(AUDIT_RESULT_FILES):,} result files, {len(AUDIT_REJECTED):,} entries the audit does not read"
# The releases table's release for the ruleset, where audit_logging names none and the venv's is not it
_table = None if config.get("audit_logging") else release_table.judging_folder(AUDIT_RULESET, AUDIT_USAGE)
AUDIT_TABLE_RELEASE = str(_table) if _table else None
RELEASE = {"stamps": release_table.stamps(_table), "ruleset": AUDIT_RULESET, "usage": AUDIT_USAGE,
           "log": AUDIT_OUT / "logs" / "judging_release.log"}


include: "release.smk"


# What both steps are asked (mlrepro/audit/steps.py Step); their logs go to the terminal too (mlrepro/jobs.py SHOWN).
AUDIT_STEP = {
    "root": str(AUDIT_ROOT), "out": str(AUDIT_OUT), "usage": AUDIT_USAGE, "ruleset": AUDIT_RULESET,
    "max_file_mb": AUDIT_MAX_BYTES / (1 << 20),
    # audit_logging=DIR: the mlperf-logging release that judges (one version's folder, or a folder of them
    # named by tag, from which the ruleset's round tag is chosen); else the releases table's for the ruleset, in the
    # user's cache (rules/release.smk installs it); else the installed one. It runs isolated (mlrepro/core/versions.py)
    "logging": str(Path(config["audit_logging"]).resolve()) if config.get("audit_logging") else AUDIT_TABLE_RELEASE,
    # audit_fast_paths=false: check with mlperf_logging's compliance checker exactly as it ships, without the
    # engine's fast paths (mlrepro/audit/fastpath.py; the same verdicts, tested on the v1.1 round, in a fraction of
    # the time)
    "fast": bool(config.get("audit_fast_paths", True)),
}
# audit_logging_compare=DIR|installed: judge by a second release too; the summarize step lists where
# verdicts differ (rules_changed.json/.csv beside the summary)
AUDIT_COMPARE = config.get("audit_logging_compare")


rule audit_all:
    input:
        AUDIT_OUT / "report",
        AUDIT_OUT / "summary.csv",
        AUDIT_OUT / "summary.json",


rule audit_check:
    input:
        AUDIT_RESULT_FILES,
        release=[ancient(f) for f in RELEASE["stamps"]],
    output:
        AUDIT_OUT / "checks.json",
    params:
        **AUDIT_STEP,
        # in params: an entry that turns into (or stops being) a symlink, FIFO, ... re-runs the check
        rejected=AUDIT_REJECTED,
    threads: workflow.cores
    message:
        f"audit_check: {AUDIT_MESSAGE}"
    log:
        AUDIT_OUT / "logs" / "audit_check.log",
    script:
        "dispatch.py"


rule audit_summarize:
    input:
        AUDIT_OUT / "checks.json",
        AUDIT_ALL_FILES,
        result_ids=config.get("audit_result_ids") or [],  # the round's published IDs (optional)
        release=[ancient(f) for f in RELEASE["stamps"]],
    output:
        AUDIT_OUT / "summary.csv",
        AUDIT_OUT / "summary.json",
        AUDIT_OUT / "audit.json",
        directory(AUDIT_OUT / "report"),
    params:
        **AUDIT_STEP,
        compare_logging=AUDIT_COMPARE if AUDIT_COMPARE in (None, "installed") else str(Path(AUDIT_COMPARE).resolve()),
        # the provenance manifest's hash as the package's report published it (optional)
        manifest_sha256=str(config["manifest_sha256"]) if config.get("manifest_sha256") else None,
    threads: workflow.cores
    message:
        f"audit_summarize: {AUDIT_MESSAGE}: verdicts, scores, the report"
    log:
        AUDIT_OUT / "logs" / "audit_summarize.log",
    script:
        "dispatch.py"
