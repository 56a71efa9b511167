# Inference with a vendor's own closed-division code (opt-in: inference.vendor; mlrepro/inference/vendor/).
#   inference_preview:  <outdir>/inference_preview.json, the steps and user.conf of every (system, benchmark,
#                       scenario, mode); runs nothing of the folder (`snakemake inference_preview`)
#   vendor_work:        the folder's working copy (<outdir>/inference_vendor/work/closed/<submitter>)
#   vendor_image, vendor_build, vendor_data (per benchmark), vendor_engines (per benchmark and scenario)
#   vendor_run:         one job per (benchmark, scenario, mode): performance, accuracy, then each audit test the round
#                       requires of the benchmark (one after another: LoadGen reads audit.config from the folder)
#   vendor_stage, vendor_compliance, vendor_truncate, vendor_export: the round's post-run targets in its order
#   vendor_package:     the staging with the folder's code/ and systems/, in the declared round's layout (relayout.py)
#   vendor_check:       the declared round's official checker on it, from inference.mlcommons_inference (a hard gate)
#   vendor_report:      throughput per accelerator and accelerator energy of each performance run (CSV, HTML, and
#                       the rows the pipeline's report shows: VENDOR_REPORT)
# Every step is the folder's own `make TARGET ...` (mlrepro/inference/vendor/steps.py), on the host or in the image.
from mlrepro.inference.vendor import steps as vendor_steps

VENDOR = PLAN.config["inference"].get("vendor")
VDIR = PLAN.out.root / "inference_vendor"
VCHECKER = PLAN.config["inference"].get("mlcommons_inference")
# what `snakemake` (rule all) makes of the vendor flow: its exported package, the package in the declared round's
# layout (checked by the round's official checker where inference.mlcommons_inference names one) and its report
VENDOR_TARGETS = [VDIR / "jobs" / "export.json", VDIR / "report.csv",
                  VDIR / "check.json" if VCHECKER else VDIR / "package"] if VENDOR else []
# the vendor runs' table rows, which the pipeline's report shows (rules/report.smk)
VENDOR_REPORT = [VDIR / "report.json"] if VENDOR else []


rule inference_preview:
    input:
        vendor_steps.sources(VENDOR),
    output:
        PLAN.out.root / "inference_preview.json",
    params:
        vendor=VENDOR,
        org=PLAN.config["org"],
        round=PLAN.config["inference"]["round"],
        checker=VCHECKER or "",
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

    VJOBS = VDIR / "jobs"  # each job's record: VJOBS / "<job>.json"
    # the node to itself: every GPU of this machine (Snakemake's local queue), an exclusive node on Slurm
    VGPU = dict(gpus=PLAN.local_gpus, slurm_extra="'--exclusive'")

    rule vendor_work:
        input:
            vendor_steps.sources(VENDOR),
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
            VJOBS / "image.json",
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
            VJOBS / "build.json",
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
            VJOBS / "data/{vbench}.json",
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
            data=VJOBS / "data/{vbench}.json",
        output:
            VJOBS / "engines/{vbench}/{vscen}.json",
        params:
            steps=lambda w: VSTEPS.get(f"engines/{w.vbench}/{w.vscen}", []),
            hz=PLAN.telemetry_hz,
            backend=PLAN.config["telemetry"].get("backend", "nvml"),
            gpus=PLAN.local_gpus,
            **VCOMMON,
        resources:
            **VGPU,
        log:
            PLAN.out.log("vendor_engines_{vbench}_{vscen}"),
        script:
            "dispatch.py"

    rule vendor_run:
        input:
            image=rules.vendor_image.output[0],
            engines=VJOBS / "engines/{vbench}/{vscen}.json",
        output:
            VJOBS / "run/{vbench}/{vscen}/{vmode}.json",
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
            **VGPU,
        log:
            PLAN.out.log("vendor_run_{vbench}_{vscen}_{vmode}"),
        script:
            "dispatch.py"

    rule vendor_stage:
        input:
            image=rules.vendor_image.output[0],
            runs=[VJOBS / f"run/{u.key}.json" for u in VUNITS if u.mode in vendor_steps.MODES],
        output:
            VJOBS / "stage.json",
        params:
            steps=VSTEPS.get("stage", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_stage"),
        script:
            "dispatch.py"

    rule vendor_audit:
        input:
            image=rules.vendor_image.output[0],
            engines=VJOBS / "engines/{vbench}/{vscen}.json",
            stage=rules.vendor_stage.output[0],
            before=lambda w: [VJOBS / f"run/{k}.json" for k in vendor_steps.audit_before(VAUDITS, w)],
        output:
            VJOBS / "run/{vbench}/{vscen}/{vmode}.json",
        wildcard_constraints:
            vmode="|".join(u.mode for u in VAUDITS) or "none",
        params:
            steps=lambda w: VSTEPS[f"run/{w.vbench}/{w.vscen}/{w.vmode}"],
            hz=PLAN.telemetry_hz,
            backend=PLAN.config["telemetry"].get("backend", "nvml"),
            gpus=PLAN.local_gpus,
            **VCOMMON,
        resources:
            **VGPU,
        log:
            PLAN.out.log("vendor_audit_{vbench}_{vscen}_{vmode}"),
        script:
            "dispatch.py"

    rule vendor_compliance:
        input:
            image=rules.vendor_image.output[0],
            stage=rules.vendor_stage.output[0],
            audits=[VJOBS / f"run/{u.key}.json" for u in VAUDITS],
        output:
            VJOBS / "stage_compliance.json",
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
            VJOBS / "truncate.json",
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
            VJOBS / "export.json",
        params:
            steps=VSTEPS.get("export", []),
            **VCOMMON,
        log:
            PLAN.out.log("vendor_export"),
        localrule: True
        script:
            "dispatch.py"

    rule vendor_package:
        input:
            truncate=rules.vendor_truncate.output[0],
        output:
            directory(VDIR / "package"),
        params:
            workdir=str(VWORK),
            submitter=VPLAN.spec.submitter,
            round=PLAN.config["inference"]["round"],
        log:
            PLAN.out.log("vendor_package"),
        localrule: True
        script:
            "dispatch.py"

    rule vendor_check:
        input:
            rules.vendor_package.output[0],
        output:
            VDIR / "check.json",
        params:
            checkout=VCHECKER or "",
            round=PLAN.config["inference"]["round"],
            submitter=VPLAN.spec.submitter,
        log:
            PLAN.out.log("vendor_check"),
        localrule: True
        script:
            "dispatch.py"

    rule vendor_report:
        input:
            [VJOBS / f"run/{u.key}.json" for u in VUNITS if u.mode == "performance"],
        output:
            table=VDIR / "report.csv",
            html=VDIR / "report.html",
            rows=VDIR / "report.json",
        log:
            PLAN.out.log("vendor_report"),
        localrule: True
        script:
            "dispatch.py"
