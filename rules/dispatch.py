# Every rule's job: Snakemake's `snakemake` object handed to the project's one seam (mlrepro/jobs.py).
from mlrepro.jobs import run

run(snakemake)  # noqa: F821 (Snakemake defines it in the script it runs)
