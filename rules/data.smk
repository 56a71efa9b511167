# Stage 2: each benchmark's dataset, as `benchmarks.<bm>.data` chooses:
#   generated (default): the mini benchmark's generator into <outdir>/data/<bm>/ with a sha256 manifest;
#   recipe: minis/<bm>/dataset.yaml, steps download -> verify -> extract -> prepare into <data_root>/<bm>/;
#   {path: DIR}: an already prepared folder, verified once against DIR/MANIFEST.sha256, never written to.
# Every folder is hashed once when it is made; a receipt in <outdir>/data_receipts/ keeps each file's
# stamp (size, mtime_ns, inode), and a start compares stamps only (PREPARE, mlrepro/planning/prepare.py; a generated
# dataset that no longer matches its manifest: `snakemake repair`). `snakemake verify_data` hashes it all.
# Each step's Slurm job: slurm.data_steps.<step> (left out: the profile's default resources).
rule data:
    input:
        PREPARE,
    output:
        PLAN.generated_manifest("{benchmark}"),
    params:
        folder=lambda w: PLAN.out.generated_data(w.benchmark),
        data=lambda w: PLAN.data_spec(w.benchmark),
        seed=PLAN.config["data_seed"],
        receipt=lambda w: PLAN.dataset_receipts(w.benchmark)[0],
    resources:
        **PLAN.data_resources("generate"),
    log:
        PLAN.out.log("data_{benchmark}"),
    benchmark:
        PLAN.out.bench("data_{benchmark}")
    script:
        "dispatch.py"


# A recipe's steps, each reading the previous step's receipt. One rule per step (data_download, ...) from one
# definition, not one rule with a {step} wildcard: a rule's resources are the same keys for every job, and a key
# that one step's slurm.data_steps sets and another's leaves out would then drop the profile's default for the other.
for _previous, _step in ((None, "download"), ("download", "verify"), ("verify", "extract"), ("extract", "prepare")):

    rule:
        name:
            f"data_{_step}"
        input:
            recipe=lambda w: PLAN.recipe_file(w.benchmark),
            previous=[PLAN.out.receipt("{benchmark}", _previous)] if _previous else [],
            # prepare with a container engine: the implementation's image, where its recipe names prepare scripts
            image=(lambda w: PLAN.prepare_image(w.benchmark)) if _step == "prepare" else [],
        output:
            PLAN.out.receipt("{benchmark}", _step),
        params:
            step=_step,
            root=lambda w: PLAN.data_root / w.benchmark,
            # extract, prepare: whose folders in a shared data_root are reused (docs/security.md)
            **({"group": PLAN.config["data_group"] or ""} if _step in ("extract", "prepare") else {}),
            # prepare in the implementation's image: its locked id, with images: locked
            **({"locked": PLAN.config["images"] == "locked"} if _step == "prepare" else {}),
        resources:
            **PLAN.data_resources(_step),
        log:
            PLAN.out.log(f"data_{_step}_{{benchmark}}"),
        script:
            "dispatch.py"


rule data_path:
    output:
        PLAN.out.receipt("{benchmark}", "path"),
    params:
        folder=lambda w: PLAN.dataset_dir(w.benchmark),
    log:
        PLAN.out.log("data_path_{benchmark}"),
    script:
        "dispatch.py"


# Every configured dataset, ready: `snakemake datasets` prepares them without running anything else.
rule datasets:
    input:
        PREPARE,
        [PLAN.dataset_ready(b) for b in PLAN.benchmarks],


# `snakemake verify_data`: hash every file of every dataset of the config in parallel, name each mismatch (the
# verdict on the terminal too).
rule verify_data:
    params:
        # the receipts there are when the DAG is built (a function: never evaluated by --list-rules or --lint)
        receipts=lambda w: [str(r) for b in PLAN.benchmarks for r in PLAN.dataset_receipts(b) if r.exists()],
    log:
        PLAN.out.log("verify_data"),
    threads: workflow.cores
    script:
        "dispatch.py"
