# `snakemake launch_preview`: what every (system, benchmark)'s runs will execute on the cluster, before any GPU hour
# is spent: <outdir>/launch_preview.json (steps as argument lists, allocation, node-hours) and the node-hours table.
# No run starts; a folder's run.sub is run with recording stand-ins for srun, sbatch, enroot and sudo
# (mlrepro/runs/preview.py, mlrepro/slurm/trace.py).


rule launch_preview:
    output:
        PLAN.out.root / "launch_preview.json",
    log:
        PLAN.out.log("launch_preview"),
    params:
        # a changed launch (config, config file, allocation) previews again
        launches=[PLAN.launch_spec(s, b).to_json() for s, b in PLAN.ordered_units],
    localrule: True
    run:
        print(planning.jobs.launch_preview(PLAN, output[0], log[0]))
