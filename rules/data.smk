# Stage 2: each benchmark's dataset, as `benchmarks.<bm>.data` chooses:
#   generated (default): the mini benchmark's generator into <outdir>/data/<bm>/ with a sha256 manifest;
#   recipe: workflows/<bm>/dataset.yaml, steps download -> verify -> extract -> prepare into <data_root>/<bm>/;
#   {path: DIR}: an already prepared folder, verified once against DIR/MANIFEST.sha256, never written to.
# Every folder is hashed once when it is made; a receipt in <outdir>/data_receipts/ keeps each file's
# stamp (size, mtime_ns, inode), and a start compares stamps only (PREPARE, mlrepro/planning/prepare.py; a generated
# dataset that no longer matches its manifest: `snakemake repair`). `snakemake verify_data` hashes it all.
rule data:
    input:
        PREPARE,
        spec=PLAN.out.spec("data-{benchmark}"),
    output:
        PLAN.generated_manifest("{benchmark}"),
    params:
        folder=lambda w: PLAN.out.generated_data(w.benchmark),
        seed=PLAN.config["data_seed"],
        receipt=lambda w: PLAN.dataset_receipts(w.benchmark)[0],
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    resources:
        **PLAN.data_resources("generate"),  # slurm.data_steps.generate: its Slurm job
    log:
        PLAN.out.log("data_{benchmark}"),
    benchmark:
        PLAN.out.bench("data_{benchmark}")
    shell:
        "{params.python:q} -m mlrepro.datasets.generated --benchmark {wildcards.benchmark:q} --out {params.folder:q} "
        "--params-file {input.spec:q} --seed {params.seed:q} --receipt {params.receipt:q} > {log:q} 2>&1 "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule data_download:
    input:
        recipe=lambda w: PLAN.recipe_file(w.benchmark),
    output:
        PLAN.out.receipt("{benchmark}", "download"),
    params:
        root=lambda w: PLAN.data_root / w.benchmark,
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    resources:
        **PLAN.data_resources("download"),  # slurm.data_steps.download: its Slurm job
    log:
        PLAN.out.log("data_download_{benchmark}"),
    shell:
        "{params.python:q} -m mlrepro.datasets download --benchmark {wildcards.benchmark:q} --recipe {input.recipe:q} "
        "--root {params.root:q} --receipt {output:q} > {log:q} 2>&1 "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule data_verify:
    input:
        recipe=lambda w: PLAN.recipe_file(w.benchmark),
        download=rules.data_download.output[0],
    output:
        PLAN.out.receipt("{benchmark}", "verify"),
    params:
        root=lambda w: PLAN.data_root / w.benchmark,
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    resources:
        **PLAN.data_resources("verify"),  # slurm.data_steps.verify: its Slurm job
    log:
        PLAN.out.log("data_verify_{benchmark}"),
    shell:
        "{params.python:q} -m mlrepro.datasets verify --benchmark {wildcards.benchmark:q} --recipe {input.recipe:q} "
        "--root {params.root:q} --receipt {output:q} > {log:q} 2>&1 "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule data_extract:
    input:
        recipe=lambda w: PLAN.recipe_file(w.benchmark),
        verified=rules.data_verify.output[0],
    output:
        PLAN.out.receipt("{benchmark}", "extract"),
    params:
        root=lambda w: PLAN.data_root / w.benchmark,
        group=PLAN.config["data_group"] or "",  # whose folders in a shared data_root are reused (docs/security.md)
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    resources:
        **PLAN.data_resources("extract"),  # slurm.data_steps.extract: its Slurm job
    log:
        PLAN.out.log("data_extract_{benchmark}"),
    shell:
        "{params.python:q} -m mlrepro.datasets extract --benchmark {wildcards.benchmark:q} --recipe {input.recipe:q} "
        "--root {params.root:q} --receipt {output:q} --trust-group={params.group:q} > {log:q} 2>&1 "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule data_prepare:
    input:
        recipe=lambda w: PLAN.recipe_file(w.benchmark),
        extracted=rules.data_extract.output[0],
        image=lambda w: PLAN.prepare_image(w.benchmark),
    output:
        PLAN.out.receipt("{benchmark}", "prepare"),
    params:
        root=lambda w: PLAN.data_root / w.benchmark,
        engine=lambda w, input: PLAN.engine_options(input.image) if input.image else [],
        group=PLAN.config["data_group"] or "",
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    resources:
        **PLAN.data_resources("prepare"),  # slurm.data_steps.prepare: its Slurm job
    log:
        PLAN.out.log("data_prepare_{benchmark}"),
    shell:
        "{params.python:q} -m mlrepro.datasets prepare --benchmark {wildcards.benchmark:q} --recipe {input.recipe:q} "
        "--root {params.root:q} --receipt {output:q} --trust-group={params.group:q} {params.engine:q} > {log:q} 2>&1 "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


rule data_path:
    output:
        PLAN.out.receipt("{benchmark}", "path"),
    params:
        folder=lambda w: PLAN.dataset_dir(w.benchmark),
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("data_path_{benchmark}"),
    shell:
        "{params.python:q} -m mlrepro.datasets adopt --folder {params.folder:q} --receipt {output:q} > {log:q} 2>&1 "
        "|| {params.python:q} -m mlrepro.core.joblog {log:q} $?"


# Every configured dataset, ready: `snakemake datasets` prepares them without running anything else.
rule datasets:
    input:
        PREPARE,
        [PLAN.dataset_ready(b) for b in PLAN.benchmarks],


# `snakemake verify_data`: hash every file of every dataset of the config in parallel, name each mismatch.
rule verify_data:
    params:
        # the receipts there are when the DAG is built (a function: never evaluated by --list-rules or --lint)
        receipts=lambda w: [str(r) for b in PLAN.benchmarks for r in PLAN.dataset_receipts(b) if r.exists()],
        # the interpreter running Snakemake runs every stage too (a venv need not be activated)
        python=PLAN.python,
    log:
        PLAN.out.log("verify_data"),
    threads: workflow.cores
    shell:
        # the verdict on the terminal too: on stdout when every file matches, on stderr when one does not
        "{params.python:q} -m mlrepro.datasets verify-data {params.receipts:q} --jobs {threads:q} > {log:q} 2>&1 "
        "&& cat {log:q} || (cat {log:q} >&2; exit 1)"
