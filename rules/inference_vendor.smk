# Inference with a vendor's own closed-division code (opt-in: inference.vendor; mlrepro/inference/vendor/).
#   inference_preview:  <outdir>/inference_preview.json, the steps and user.conf of every (system, benchmark,
#                       scenario, mode); runs nothing of the folder (`snakemake inference_preview`)
#   vendor_work:        the folder's working copy (<outdir>/inference_vendor/work/closed/<submitter>)
#   vendor_image, vendor_build, vendor_data (per benchmark), vendor_engines (per benchmark and scenario)
#   vendor_run:         one job per (benchmark, scenario, mode): performance, accuracy, then each audit test the round
#                       requires of the benchmark (one after another: LoadGen reads audit.config from the folder)
#   vendor_stage, vendor_compliance, vendor_truncate, vendor_export: the round's post-run targets in its order
#   vendor_report:      throughput per accelerator and accelerator energy of each performance run
# Every step is the folder's own `make TARGET ...` (mlrepro/inference/vendor/steps.py), on the host or in the image.
from mlrepro.inference.vendor import steps as vendor_steps

VENDOR = PLAN.config["inference"].get("vendor")
VDIR = PLAN.out.root / "inference_vendor"
# what `snakemake` (rule all) makes of the vendor flow: its exported package and its report
VENDOR_TARGETS = [VDIR / "jobs" / "export.json", VDIR / "report.csv"] if VENDOR else []


def _vendor_sources():
    """What the preview reads (enumerated while the DAG is built, as names only): a changed file previews again."""
    if not VENDOR:
        return []
    root = Path(VENDOR["code"])
    patterns = ("Makefile*", "VERSION", "configs/**/*.py", "code/common/constants.py", "code/common/systems/*.py",
                "code/actionhandler/run_audit.py")
    return sorted(str(p) for pat in patterns for p in root.glob(pat) if p.is_file() and not p.is_symlink())


rule inference_preview:
    input:
        _vendor_sources(),
    output:
        PLAN.out.root / "inference_preview.json",
    params:
        vendor=VENDOR,
        org=PLAN.config["org"],
    log:
        PLAN.out.log("inference_preview"),
    localrule: True
    script:
        "dispatch.py"


if VENDOR:
    VPLAN = vendor_steps.Planner(vendor_steps.Spec.from_config(VENDOR, PLAN.config["org"]))
    VUNITS = VPLAN.units()
    VSTEPS = {}  # job -> its steps, in order (shared jobs once)
    for _u in VUNITS:
        for _s in VPLAN.steps(_u):
            VSTEPS.setdefault(_s["job"], [])
            if _s not in VSTEPS[_s["job"]]:
                VSTEPS[_s["job"]].append(_s)
    VWORK = VDIR / "work" / "closed" / VPLAN.spec.submitter
    VAUDITS = [u for u in VUNITS if u.mode not in vendor_steps.MODES]
    VCOMMON = dict(workdir=str(VWORK), scratch=str(VDIR / "scratch"), engine=PLAN.config["engine"],
                   image=VENDOR.get("image"), custom_definition=VENDOR.get("custom_definition"))

    def _vout(job):
        return VDIR / "jobs" / f"{job}.json"

    def _gpu_resources():
        # the node to itself: every GPU of this machine (Snakemake's local queue), an exclusive node on Slurm
        return dict(gpus=PLAN.local_gpus, slurm_extra="'--exclusive'")

    rule vendor_work:
        input:
            _vendor_sources(),
        output:
            VDIR / "work.json",
        params:
            code=str(Path(VENDOR["code"]).resolve()),
            workdir=str(VWORK),
        log:
            PLAN.out.log("vendor_work"),
        localrule: True
        script:
            "dispatch.py"

    rule vendor_image:
        input:
            rules.vendor_work.output[0],
        output:
            _vout("image"),
        params:
            # none with a given image, or natively (the steps run on this host: nothing to build)
            steps=[] if VENDOR.get("image") or PLAN.config["engine"] == "native" else VSTEPS.get("image", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_image"),
        localrule: True
        script:
            "dispatch.py"

    rule vendor_build:
        input:
            image=rules.vendor_image.output[0],
        output:
            _vout("build"),
        params:
            steps=VSTEPS.get("build", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_build"),
        script:
            "dispatch.py"

    rule vendor_data:
        input:
            image=rules.vendor_image.output[0],
            build=rules.vendor_build.output[0],
        output:
            _vout("data/{vbench}"),
        params:
            steps=lambda w: VSTEPS.get(f"data/{w.vbench}", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_data_{vbench}"),
        script:
            "dispatch.py"

    rule vendor_engines:
        input:
            image=rules.vendor_image.output[0],
            data=_vout("data/{vbench}"),
        output:
            _vout("engines/{vbench}/{vscen}"),
        params:
            steps=lambda w: VSTEPS.get(f"engines/{w.vbench}/{w.vscen}", []),
            hz=PLAN.telemetry_hz,
            backend=PLAN.config["telemetry"].get("backend", "nvml"),
            gpus=PLAN.local_gpus,
            **VCOMMON,
        resources:
            **_gpu_resources(),
        log:
            PLAN.out.log("vendor_engines_{vbench}_{vscen}"),
        script:
            "dispatch.py"

    rule vendor_run:
        input:
            image=rules.vendor_image.output[0],
            engines=_vout("engines/{vbench}/{vscen}"),
        output:
            _vout("run/{vbench}/{vscen}/{vmode}"),
        wildcard_constraints:
            vmode="|".join(vendor_steps.MODES),
        params:
            steps=lambda w: VSTEPS[f"run/{w.vbench}/{w.vscen}/{w.vmode}"],
            hz=PLAN.telemetry_hz,
            backend=PLAN.config["telemetry"].get("backend", "nvml"),
            gpus=PLAN.local_gpus,
            result_dir=lambda w: VPLAN.log_dir(vendor_steps.Unit(w.vbench, w.vscen, w.vmode))
            if w.vmode == "performance" else "",
            accelerators=VPLAN.accelerators(),
            **VCOMMON,
        resources:
            **_gpu_resources(),
        log:
            PLAN.out.log("vendor_run_{vbench}_{vscen}_{vmode}"),
        script:
            "dispatch.py"

    rule vendor_stage:
        input:
            image=rules.vendor_image.output[0],
            runs=[_vout(f"run/{u.key}") for u in VUNITS if u.mode in vendor_steps.MODES],
        output:
            _vout("stage"),
        params:
            steps=VSTEPS.get("stage", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_stage"),
        script:
            "dispatch.py"

    def _audit_before(w):
        """The audit run before this one: one audit at a time in the folder (its audit.config and verify files)."""
        key = f"{w.vbench}/{w.vscen}/{w.vmode}"
        keys = [u.key for u in VAUDITS]
        i = keys.index(key)
        return [_vout(f"run/{keys[i - 1]}")] if i else []

    rule vendor_audit:
        input:
            image=rules.vendor_image.output[0],
            engines=_vout("engines/{vbench}/{vscen}"),
            stage=rules.vendor_stage.output[0],
            before=_audit_before,
        output:
            _vout("run/{vbench}/{vscen}/{vmode}"),
        wildcard_constraints:
            vmode="|".join(u.mode for u in VAUDITS) or "none",
        params:
            steps=lambda w: VSTEPS[f"run/{w.vbench}/{w.vscen}/{w.vmode}"],
            hz=PLAN.telemetry_hz,
            backend=PLAN.config["telemetry"].get("backend", "nvml"),
            gpus=PLAN.local_gpus,
            **VCOMMON,
        resources:
            **_gpu_resources(),
        log:
            PLAN.out.log("vendor_audit_{vbench}_{vscen}_{vmode}"),
        script:
            "dispatch.py"

    rule vendor_compliance:
        input:
            image=rules.vendor_image.output[0],
            stage=rules.vendor_stage.output[0],
            audits=[_vout(f"run/{u.key}") for u in VAUDITS],
        output:
            _vout("stage_compliance"),
        params:
            steps=VSTEPS.get("stage_compliance", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_compliance"),
        script:
            "dispatch.py"

    rule vendor_truncate:
        input:
            image=rules.vendor_image.output[0],
            compliance=rules.vendor_compliance.output[0],
        output:
            _vout("truncate"),
        params:
            steps=VSTEPS.get("truncate", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_truncate"),
        script:
            "dispatch.py"

    rule vendor_export:
        input:
            image=rules.vendor_image.output[0],
            truncate=rules.vendor_truncate.output[0],
        output:
            _vout("export"),
        params:
            steps=VSTEPS.get("export", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_export"),
        localrule: True
        script:
            "dispatch.py"

    rule vendor_report:
        input:
            [_vout(f"run/{u.key}") for u in VUNITS if u.mode == "performance"],
        output:
            VDIR / "report.csv",
        log:
            PLAN.out.log("vendor_report"),
        localrule: True
        script:
            "dispatch.py"
