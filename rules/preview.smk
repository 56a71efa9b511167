# `snakemake launch_preview`: what every (system, benchmark)'s runs will execute on the cluster, before any GPU hour
# is spent: <outdir>/launch_preview.json (steps as argument lists, allocation, node-hours) and the node-hours table.
# No run starts; a folder's run.sub is run with recording stand-ins for srun, sbatch, enroot and sudo
# (mlrepro/runs/preview.py, mlrepro/slurm/trace.py).


rule launch_preview:
    input:
        # each (system, benchmark)'s launch file (rules/runs.smk): a changed launch (config, config file, allocation)
        # previews again
        PLAN.launch_files,
        # what its params read (ancient: as the runs take them, rules/runs.smk)
        captures=[ancient(str(f)) for f in PLAN.capture_files],
    output:
        PLAN.out.root / "launch_preview.json",
    params:
        # a function of the input (the launch files, read from capture records): not tracked
        units=lambda w, input: PLAN.preview_units(),
    log:
        PLAN.out.log("launch_preview"),
    localrule: True
    script:
        "dispatch.py"
