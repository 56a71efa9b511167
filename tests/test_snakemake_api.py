"""The project reads of Snakemake only what Snakemake documents: the ``workflow`` object's documented attributes,
its documented modules, its command line. Anything else may change in any 9.x release (the suite runs with two:
.ci/run's second-version step), so a use of it fails here, naming the file and line."""

from __future__ import annotations

import inspect
import re
import subprocess
from pathlib import Path

from mlrepro.core import smk
from tests.conftest import REPO

# Snakemake's docs (snakemake.readthedocs.io, "Snakefiles and Rules", "Modularization"): workflow.basedir and
# workflow.current_basedir (the Snakefile's folder), workflow.source_path() (a file beside it), workflow.snakefile,
# workflow.cores ("threads: workflow.cores"). Nothing else of the object is documented for a Snakefile.
DOCUMENTED_WORKFLOW = {"basedir", "current_basedir", "source_path", "snakefile", "cores"}
# Documented modules a Snakefile imports from: WorkflowError (raised for a clear error), the logger, snakemake.utils.
DOCUMENTED_IMPORTS = {"snakemake.exceptions": {"WorkflowError"}, "snakemake.logging": {"logger"},
                      "snakemake.utils": {"min_version", "validate"}}
USE = re.compile(r"(?<![\w.])workflow\.([A-Za-z_]\w*)")
IMPORT = re.compile(r"^\s*from (snakemake(?:\.\w+)*) import ([^\n#]+)|^\s*import (snakemake\S*)", re.M)


def _project_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split()
    return [REPO / f for f in listed if (f.endswith((".py", ".smk")) or Path(f).name == "Snakefile")
            and (REPO / f).is_file()]


def test_every_workflow_use_is_documented() -> None:
    files = _project_files()
    assert any(f.name == "Snakefile" for f in files) and any(f.suffix == ".smk" for f in files)
    undocumented = [f"{f.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: workflow.{m.group(1)}"
                    for f in files if f != Path(__file__) for text in [f.read_text(encoding="utf-8")]
                    for m in USE.finditer(text) if m.group(1) not in DOCUMENTED_WORKFLOW]
    assert undocumented == [], "Snakemake's workflow object beyond its documented API:\n" + "\n".join(undocumented)


def test_only_documented_modules_of_snakemake_are_imported() -> None:
    found = []
    for f in _project_files():
        if f == Path(__file__):
            continue
        for m in IMPORT.finditer(f.read_text(encoding="utf-8")):
            module, names, bare = m.group(1), m.group(2), m.group(3)
            allowed = DOCUMENTED_IMPORTS.get(module or "", set())
            names_used = {n.strip().split(" as ")[0] for n in (names or "").strip("()").split(",") if n.strip()}
            if bare or not names_used <= allowed:
                found.append(f"{f.relative_to(REPO)}: {m.group(0).strip()}")
    assert found == [], "imports of Snakemake's internals:\n" + "\n".join(found)


def test_a_recorded_signature_is_what_inspect_returns() -> None:
    def params(wildcards: object, input: object) -> list[object]:  # a rule's function, as Snakemake calls it
        return [wildcards, input]

    recorded = smk.signature_once(params)
    assert recorded is params and list(inspect.signature(params).parameters) == ["wildcards", "input"]
    assert inspect.signature(params) is params.__signature__  # type: ignore[attr-defined]


def test_the_executor_comes_from_the_command_line_or_its_profile(tmp_path: Path) -> None:
    assert smk.executor(["--cores", "2"], {}) is None
    assert smk.executor(["-e", "slurm"], {}) == "slurm"
    assert smk.executor(["--executor=slurm", "-n"], {}) == "slurm"
    assert smk.executor(["--profile", str(REPO / "profiles" / "slurm")], {}) == smk.SLURM_EXECUTOR
    assert smk.executor(["--profile", str(REPO / "profiles" / "default")], {}) is None
    assert smk.executor([], {"SNAKEMAKE_PROFILE": str(REPO / "profiles" / "slurm")}) == "slurm"
    named = tmp_path / "snakemake" / "cluster"
    named.mkdir(parents=True)
    (named / "config.yaml").write_text("executor: slurm\n")
    assert smk.executor(["--profile", "cluster"], {"XDG_CONFIG_HOME": str(tmp_path)}) == "slurm"
    assert smk.executor(["--profile", "cluster", "--executor", "local"], {"XDG_CONFIG_HOME": str(tmp_path)}) == "local"


def test_the_config_files_come_from_the_command_line_and_its_profile(tmp_path: Path) -> None:
    assert smk.configfiles(["--cores", "2"], {}) == []
    assert smk.configfiles(["--configfile", "a.yaml", "b.yaml", "-n"], {}) == [Path("a.yaml"), Path("b.yaml")]
    assert smk.configfiles(["--configfiles=c.yaml", "--cores", "1"], {}) == [Path("c.yaml")]
    profile = tmp_path / "p"
    profile.mkdir()
    (profile / "config.yaml").write_text("configfile: [d.yaml, e.yaml]\n")
    assert smk.configfiles(["--profile", str(profile)], {}) == [Path("d.yaml"), Path("e.yaml")]
