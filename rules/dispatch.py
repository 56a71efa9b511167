# Every rule's job: Snakemake's `snakemake` object handed to the project's one seam (mlrepro/jobs.py). Not again in
# a process that a job starts with multiprocessing's spawn, which runs this file (its __main__) as __mp_main__.
if __name__ == "__main__":
    from mlrepro.jobs import run

    run(snakemake)  # noqa: F821 (Snakemake defines it in the script it runs)
