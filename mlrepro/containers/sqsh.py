"""A registry image imported once per system into an enroot squashfs file on the shared file system.

A folder's run.sub imports its image (``CONT``) on every node at every run (``srun --container-image=$CONT``): for
a registry reference that is a pull of tens of GB per node and run, under the registry's rate limits. NVIDIA's
clusters import it once (``enroot import``) into a ``.sqsh`` on shared storage and give run.sub that file. So does
the pipeline (engine enroot): each (system, registry reference) is one job, on a node of that system (its
architecture: ``systems.<name>.platform``), that runs ``enroot import`` into ``<outdir>/sqsh/<system>/``
and records the file's SHA-256 and size; every run of the system is given that file as CONT, and the run's job
refuses a file whose hash is not the recorded one (replaced or half-written) before run.sub starts.

The reference names the image: a tag (``:24.09``) is what the registry serves when the import runs; pin a digest
(``nvcr.io/nvidia/pytorch@sha256:...``) to name the exact image, and the file is named for it: a new digest is a
new import, and the one file serves every run that names it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlrepro.core import atomic
from mlrepro.core.errors import MlreproError
from mlrepro.core.hashing import sha256_file
from mlrepro.core.job import Job

SQSH = ".sqsh"
DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})$")
# enroot's docker:// URI: docker://[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]
REF = re.compile(r"^(?:(?P<registry>[A-Za-z0-9.-]+(?::[0-9]+)?)/)?(?P<image>[a-z0-9._/-]+)"
                 r"(?P<tail>(?::\w[\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?)$")
ARCHES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64", "linux/arm64/v8": "aarch64", "linux/ppc64le": "ppc64le"}


class SqshError(MlreproError, RuntimeError):
    pass


def is_registry_ref(image: str) -> bool:
    """A registry reference (``nvcr.io/nvidia/pytorch:24.09-py3``), not a file (a path or a ``.sqsh``)."""
    return not (image.startswith(("/", "./", "../", "~")) or image.endswith((SQSH, ".sif")))


def enroot_uri(ref: str) -> str:
    """enroot's form of a registry reference: the registry (a first part with a dot or port, or localhost) before
    ``#`` (``nvcr.io/nvidia/pytorch:24.09`` -> ``docker://nvcr.io#nvidia/pytorch:24.09``)."""
    m = REF.match(ref)
    if not m:
        raise SqshError(f"benchmarks.<bm>.image: {ref!r} is no registry reference (REGISTRY/IMAGE[:TAG][@sha256:...])")
    registry = m.group("registry")
    if registry and not ("." in registry or ":" in registry or registry == "localhost"):
        return f"docker://{ref}"  # a Docker Hub namespace (library/ubuntu), no registry
    return f"docker://{registry}#{m.group('image')}{m.group('tail')}" if registry else f"docker://{ref}"


def arch(platform: str | None) -> str | None:
    """enroot's --arch of a system's platform (linux/arm64 -> aarch64); None: the node's own."""
    if platform is None:
        return None
    if platform not in ARCHES:
        raise SqshError(f"systems.<name>.platform: {platform!r}: enroot imports for {', '.join(sorted(ARCHES))}")
    return ARCHES[platform]


def file_name(ref: str) -> str:
    """The .sqsh's name: the reference made a file name, with its digest where it pins one."""
    base = re.sub(r"[^A-Za-z0-9_.-]+", "+", DIGEST.sub("", ref)).strip("+.")[:150]
    digest = DIGEST.search(ref)
    return f"{base}{'@' + digest.group(1) if digest else ''}{SQSH}"


@dataclass(frozen=True)
class Import:
    """One system's import of one registry image: where its .sqsh and record go, and the job that makes them."""
    system: str
    ref: str
    arch: str | None
    sqsh: str  # <outdir>/sqsh/<system>/<name>.sqsh, CONT for every run of the system that names ref
    record: str  # <sqsh>.json: reference, URI, arch, sha256 and size of the file

    @property
    def argv(self) -> list[str]:
        """The import job's command (into a temporary name beside the file: :func:`run`)."""
        return argv(self.ref, self.arch, Path(self.sqsh))


def planned(outdir: Path, system: str, ref: str, platform: str | None) -> Import:
    folder = outdir / "sqsh" / system
    sqsh = folder / file_name(ref)
    return Import(system, ref, arch(platform), str(sqsh), str(sqsh) + ".json")


def argv(ref: str, machine: str | None, out: Path) -> list[str]:
    return ["enroot", "import", *(["--arch", machine] if machine else []), "--output", str(out), enroot_uri(ref)]


def run(job: Import) -> dict[str, Any]:
    """Import the image (a temporary file, renamed whole once imported and hashed), then write its record."""
    sqsh = Path(job.sqsh)
    sqsh.parent.mkdir(parents=True, exist_ok=True)
    part = sqsh.with_name(f".{sqsh.name}.{os.getpid()}.part")
    part.unlink(missing_ok=True)  # enroot refuses an existing output
    try:
        proc = subprocess.run(argv(job.ref, job.arch, part), stdin=subprocess.DEVNULL, check=False)
        if proc.returncode != 0 or not part.is_file():
            raise SqshError(f"`{' '.join(argv(job.ref, job.arch, part))}` exited with status {proc.returncode} "
                            f"(system {job.system}): is the registry reachable from the node, are your credentials "
                            "in enroot's .credentials?")
        record = {"ref": job.ref, "uri": enroot_uri(job.ref), "arch": job.arch, "system": job.system,
                  "file": sqsh.name, "sha256": sha256_file(part), "size": part.stat().st_size}
        part.replace(sqsh)
    finally:
        part.unlink(missing_ok=True)
    atomic.write_json(Path(job.record), record)
    return record


def verify(sqsh: Path, record_path: Path) -> dict[str, Any]:
    """The record of ``sqsh`` after checking the file against it (hash and size); SqshError otherwise."""
    try:
        record = json.loads(record_path.read_text())
        expected, size = str(record["sha256"]), int(record["size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SqshError(f"{record_path}: no import record of {sqsh} ({e}); delete both to import again") from None
    if not sqsh.is_file() or sqsh.stat().st_size != size or sha256_file(sqsh) != expected:
        raise SqshError(f"{sqsh} is not the image imported from {record.get('ref')} (its record {record_path} says "
                        f"sha256 {expected[:16]}..., {size} bytes): replaced or half-written; delete both to import "
                        "it again")
    return record


def describe(job: Import) -> dict[str, Any]:
    """What the launch preview shows of a system's import: the step (argv), where it runs, the file and its size
    (where it is imported already; else unknown until the job has run: the registry's layers, compressed)."""
    record = Path(job.record)
    done = json.loads(record.read_text()) if record.is_file() else None
    return {**asdict(job), "argv": job.argv, "runs_on": f"a node of system {job.system}" +
            (f" ({job.arch})" if job.arch else ""), "imported": done is not None,
            "size_bytes": done.get("size") if done else None}


def job(job: Job) -> None:
    """The sqsh_import rule's job (rules/containers.smk): params job (an Import as a JSON object)."""
    run(Import(**job.params["job"]))
