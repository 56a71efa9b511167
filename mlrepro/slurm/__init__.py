"""Slurm: job shapes as Slurm resources, the multi-process launcher, container command lines, job states."""
