"""The round's flow, read from a vendor folder's Makefiles: which targets prepare (image, build, data, engines), which
runs the harness, which audit tests it offers (and the tests each runs), which stage, stage the audits, truncate,
export, check and pack, in the order the round needs them, and where each runs (host or container).

Detected from the targets and their recipes, never from a round's name: NVIDIA's v2.0 (one Makefile,
``python3 code/main.py``, ``update_results`` writing into the tree, ``run_audit_test04`` running TEST04-A and
TEST04-B) and v4.1 (eight Makefiles, ``python3 -m code.main``, ``stage_results`` into build/submission-staging, TEST06)
read the same way. A target's role is found among the names NVIDIA has used for it; its recipe decides the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlrepro.inference.vendor.makefiles import MakefileError, Makefiles

# The preparation steps in their order; a folder has those it has.
PREPARE = ("prebuild", "build", "download_model", "download_data", "preprocess_data", "generate_engines")
# After the runs, by role: the names each role's target has had across NVIDIA's rounds (the first present wins).
ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("stage", ("stage_results", "update_results")),
    ("stage_compliance", ("stage_compliance", "update_compliance")),
    ("truncate", ("truncate_results",)),
    ("export", ("export_submission",)),
    ("pack", ("pack_submission",)),
)  # not check_submission: the pipeline runs the declared round's official checker itself (rules/inference.smk)
RUN = "run_harness"
AUDIT_PREFIX = "run_audit_test"
HARNESS = re.compile(r"(?:\$\(PYTHON3_CMD\)|python3?(?:\.\d+)?)\s+(-m\s+code\.main|code/main\.py)(?=\s)")
AUDIT_TEST = re.compile(r"--audit_test=\"?([A-Za-z0-9_-]+)")
FLAG = re.compile(r"(?<!\S)--([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"]*\"|'[^']*'|\S+)")
# A recipe that builds or launches containers, or says it must not run in one, or leaves the project root (the
# container mounts the project root only): the host's.
HOST = re.compile(r"\bdocker\s+(?:build|run|pull|push)\b|\$\(DOCKER_RUN_CMD\)|cannot be executed from within the docker"
                  r"|(?:^|\s)cd\s+\.\./\.\.")


@dataclass(frozen=True)
class Audit:
    mode: str  # TEST01, TEST04 (v2.0's run_audit_test04: TEST04-A and TEST04-B), ...
    target: str
    tests: tuple[str, ...]  # the --audit_test values its recipe passes
    flags: dict[str, str]  # the harness flags its recipe adds (--server_target_qps_adj_factor=0.92, ...)


@dataclass(frozen=True)
class Flow:
    makefiles: Makefiles
    harness: str  # how the recipes start the harness: "-m code.main" or "code/main.py"
    prepare: tuple[str, ...]
    audits: tuple[Audit, ...]
    post: tuple[tuple[str, str], ...]  # (role, target) in the round's order
    version: str | None  # the folder's VERSION file, when it has one

    @classmethod
    def read(cls, folder: Path) -> Flow:
        mk = Makefiles.read(folder)
        if not mk.has(RUN):
            raise MakefileError(f"{folder}: its Makefiles ({', '.join(mk.files)}) have no {RUN} target: not a "
                                "closed-division code folder of NVIDIA's layout (inference.vendor.code names the "
                                "folder holding Makefile, code/ and configs/, e.g. closed/NVIDIA)")
        found = next((m.group(1) for line in mk.expanded(RUN) if (m := HARNESS.search(line))), None)
        if found is None:
            raise MakefileError(f"{folder}/{mk.rules[RUN].file}: the {RUN} recipe starts no harness "
                                "(python3 -m code.main or python3 code/main.py)")
        harness = re.sub(r"\s+", " ", found)
        version_file = folder / "VERSION"
        version = (version_file.read_text(encoding="utf-8", errors="replace").strip()[:40]
                   if version_file.is_file() and not version_file.is_symlink() else None)
        post = tuple((role, next(t for t in names if mk.has(t))) for role, names in ROLES
                     if any(mk.has(t) for t in names))
        return cls(mk, harness, tuple(t for t in PREPARE if mk.has(t)), _audits(mk), post, version)

    def where(self, target: str) -> str:
        """"host" or "container": where the round's own instructions run ``target``."""
        return "host" if any(HOST.search(line) for line in self.makefiles.expanded(target)) else "container"

    def takes(self, target: str, variable: str) -> bool:
        """Whether ``target``'s recipe (with its sub-makes) reads ``$(variable)``."""
        return any(f"$({variable})" in line for line in self.makefiles.expanded(target))

    def audit(self, mode: str) -> Audit:
        return next(a for a in self.audits if a.mode == mode)

    def describe(self) -> dict[str, Any]:
        return {"makefiles": list(self.makefiles.files), "harness": self.harness, "version": self.version,
                "prepare": list(self.prepare), "audits": {a.mode: {"target": a.target, "tests": list(a.tests)}
                                                          for a in self.audits},
                "post": [{"role": r, "target": t} for r, t in self.post]}


def _audits(mk: Makefiles) -> tuple[Audit, ...]:
    """The audit targets a submitter calls: run_audit_test* targets that start the harness with --audit_test and that
    no other such target runs (the retries' ``_once`` helpers are theirs)."""
    candidates = [t for t in mk.rules if t.startswith(AUDIT_PREFIX)]
    called = {s for t in candidates for s in mk.sub_makes(t)}
    found = []
    for t in candidates:
        if t in called:
            continue
        lines = [line for line in mk.expanded(t) if HARNESS.search(line)]
        tests = tuple(dict.fromkeys(m for line in lines for m in AUDIT_TEST.findall(line)))
        if not tests:
            continue
        flags = {k: v.strip("\"'") for line in lines for k, v in FLAG.findall(line)
                 if k not in ("audit_test", "action")}
        mode = tests[0] if len(tests) == 1 else "TEST" + t[len(AUDIT_PREFIX):].upper()
        found.append(Audit(mode, t, tests, flags))
    return tuple(sorted(found, key=lambda a: a.mode))
