# Stage 2: one generated dataset per benchmark, with a sha256 manifest every reader verifies.
from mlrepro import data as _data

# A dataset that no longer matches its manifest is rebuilt: dropping its manifest makes it stale.
for _benchmark in BENCHMARKS:
    _folder = OUT / "data" / _benchmark
    if (_folder / _data.MANIFEST).exists() and (_problems := _data.verify(_folder)):
        for _p in _problems:
            logger.warning(f"dataset {_folder}: {_p.file}: {_p.problem}; regenerating it")
        (_folder / _data.MANIFEST).unlink()


rule data:
    output:
        OUT / "data" / "{benchmark}" / _data.MANIFEST,
    params:
        folder=lambda w: OUT / "data" / w.benchmark,
        spec=lambda w: json.dumps(BENCHMARKS[w.benchmark].data_params, sort_keys=True),
        seed=config["data_seed"],
    log:
        INFO / "logs" / "data_{benchmark}.log",
    benchmark:
        INFO / "benchmarks" / "data_{benchmark}.tsv"
    shell:
        "{PY} -m mlrepro.data --benchmark {wildcards.benchmark} --out {params.folder:q} "
        "--params {params.spec:q} --seed {params.seed} > {log} 2>&1"
