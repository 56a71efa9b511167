# Inference audit: `snakemake --cores 1 --config audit=PATH usage=inference audit_out=DIR`.
# PATH is a published inference round (<division>/<org>/results/...), a division or one organisation.
# One job reads every LoadGen summary and system description (a whole round takes seconds) and writes
# DIR/inference_results.{csv,json}, DIR/inference_table.csv (per system), the seed-style
# DIR/inference_seed_table.csv (benchmark x accelerator) and DIR/inference_report.html.
from pathlib import Path

from snakemake.exceptions import WorkflowError

INF_AUDIT_ROOT = Path(config["audit"]).resolve()
INF_AUDIT_OUT = Path(config.get("audit_out") or "audit")

if not INF_AUDIT_ROOT.is_dir():
    raise WorkflowError(f"audit={config['audit']}: not a folder")
if INF_AUDIT_OUT.resolve().is_relative_to(INF_AUDIT_ROOT):
    raise WorkflowError(f"audit_out={INF_AUDIT_OUT} lies inside the audited round {INF_AUDIT_ROOT}; choose another folder")

# Enumerated at parse time, so that a changed, added or removed file re-runs the audit.
INF_AUDIT_FILES = sorted(
    p for pattern in ("**/mlperf_log_summary.txt", "**/systems/*.json", "**/accuracy.txt")
    for p in INF_AUDIT_ROOT.glob(pattern) if p.is_file() and not p.is_symlink()
)


rule inference_audit_all:
    input:
        INF_AUDIT_OUT / "inference_report.html",


rule inference_audit:
    input:
        INF_AUDIT_FILES,
    output:
        INF_AUDIT_OUT / "inference_results.csv",
        INF_AUDIT_OUT / "inference_results.json",
        INF_AUDIT_OUT / "inference_table.csv",
        INF_AUDIT_OUT / "inference_seed_table.csv",
        INF_AUDIT_OUT / "inference_report.html",
    params:
        root=INF_AUDIT_ROOT,
        out=INF_AUDIT_OUT,
    log:
        INF_AUDIT_OUT / "logs" / "inference_audit.log",  # on the terminal too (mlrepro/jobs.py SHOWN)
    script:
        "dispatch.py"
