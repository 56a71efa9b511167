"""A job that writes the text its rule's params hold, atomically: a stage's spec (rules/common.smk ``spec``), a unit's
launch file (rules/runs.smk ``launch``).

A ``script:`` job, not ``run:``: their texts read the config files' capture records, which a job writes, so that
while the DAG of a first run is built they are ``<TBD>``, and Snakemake (9.14 to 9.27) records a ``run:`` job's
params as they were then (it runs the job in a process of its own and does not evaluate them again in its own), which
would make the job run again at the next invocation. Not ``shell:``: a text as a word of the command line is
limited to 128 KiB (the report spec of a large submission is more).
"""

from pathlib import Path

from mlrepro.core import atomic

params, output, log = snakemake.params, snakemake.output, snakemake.log  # type: ignore[name-defined]  # noqa: F821
atomic.write_text(output[0], params.text)
Path(log[0]).write_text(f"{output[0]}: written ({len(params.text)} characters)\n", encoding="utf-8")
