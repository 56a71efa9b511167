# The mlperf-logging release that judges the ruleset, where it is the releases table's (mlrepro/core/releases.yaml)
# and not the venv's own: installed once into the user's cache, from PyPI at the pinned version and hash, the first
# time a ruleset needs it; a job, never while the DAG is built. Its output is the stamp beside the release; the steps
# it judges (the gate, the package checker, the audit) take the stamp as an input (ancient: a reinstalled release
# of the same pinned tree re-judges nothing) and verify the release before each use. The includer sets RELEASE:
# stamps (mlrepro.core.release_table.stamps of the judging folder: one, or none), ruleset, usage and log.
if RELEASE["stamps"]:

    rule judging_release:
        output:
            RELEASE["stamps"][0],
        params:
            ruleset=RELEASE["ruleset"],
            usage=RELEASE["usage"],
        log:
            RELEASE["log"],
        localrule: True  # on a cluster, the submit host: it reaches PyPI where compute nodes may not
        script:
            "dispatch.py"
