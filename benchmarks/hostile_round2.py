"""Issue 23's hostile cases, each tried on the real code, with the figures its closing note asks for.

    python benchmarks/fault_matrix.py --round2          (these alone, a few minutes; Podman's if it answers)

Every case of the issue: dataset archives and recipe fields, a package whose config file and code act while it
is planned and reproduced, files that would hang or crash the readers, the audit's hostile entries, names,
locks and a given dataset's manifest. Per case: its verdict (refused, or what happened), a crash (a traceback,
an exception other than the case's own error, a hang), files written outside their folder, commands of a
package or recipe executed while planning (canaries), and the package's bytes changed by a reproduction.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--cores", "2"]
HANG_S = 60


class Hang(Exception):
    pass


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def _smk(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.run([*SNAKEMAKE, "--directory", str(work), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=900, check=False)


def _expect(kind: type[BaseException] | tuple[type[BaseException], ...], call: Callable[[], Any]) -> dict[str, Any]:
    """Run ``call`` (bounded in time): refused with ``kind`` is the verdict; anything else is a crash."""
    def alarm(*_: Any) -> None:
        raise Hang(f"no answer in {HANG_S} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        call()
        return {"verdict": "accepted", "crash": False}
    except kind as e:
        return {"verdict": "refused", "crash": False, "message": str(e).splitlines()[0][:160]}
    except BaseException as e:
        return {"verdict": f"{type(e).__name__}", "crash": True, "message": str(e)[:160]}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _case(rows: list[dict[str, Any]], group: str, name: str, result: dict[str, Any], want: str = "refused",
          **figures: Any) -> None:
    row = {"group": group, "case": name, "outside": 0, "planning_commands": 0, **result, **figures}
    row["ok"] = row["verdict"] == want and not row["crash"] and not row["outside"] and not row["planning_commands"]
    rows.append(row)
    print(f"  {group}: {name}: {row['verdict']}{' CRASH' if row['crash'] else ''}"
          f"{' outside=' + str(row['outside']) if row['outside'] else ''}"
          f"{' planning_commands=' + str(row['planning_commands']) if row['planning_commands'] else ''}",
          flush=True)


def datasets(base: Path, rows: list[dict[str, Any]]) -> None:
    from mlrepro.datasets import extract, recipe, steps
    from mlrepro.datasets.fetch import DatasetError
    from mlrepro.datasets.manifest import MANIFEST
    from tests.test_dataset_archives import HOSTILE_TARS, _recipe, _tar, path_max_tar, zeros_zip

    archives = {f"tar: {problem}": _tar(*members) for members, problem in HOSTILE_TARS}
    archives |= {"PATH_MAX tar": path_max_tar(), "PATH_MAX tar, bottom link at its real path": path_max_tar(False),
                 "zip of 1 GiB of zeros": zeros_zip()}
    for n, (name, data) in enumerate(archives.items()):
        folder = base / "archives" / str(n)
        (folder / "outside").mkdir(parents=True)
        (folder / "hostile").write_bytes(data)
        result = _expect(extract.ArchiveError, lambda f=folder: extract.extract(
            f / "hostile", f / "dest", extract.Budget(16 << 20, "fault matrix")))
        outside = len(os.listdir(folder / "outside")) + len(os.listdir(folder)) - 3
        _case(rows, "archive", name, result, outside=outside)
        shutil.rmtree(folder)
    fields = {"into ../../../ESC": {"extract": {"archive": "ok.tar", "into": "../../../ESC"}},
              "into /tmp/ESC": {"extract": {"archive": "ok.tar", "into": "/tmp/ESC"}},
              "archive ../ok.tar": {"extract": {"archive": "../ok.tar"}},
              "gunzip ../../x.gz": {"extract": {"gunzip": "../../x.gz"}},
              "published_md5 ../../sums.json": {"prepare__published_md5": "../../sums.json"},
              "source file ../x": {"sources": [{"file": "../x", "url": "http://x"}]}}
    for name, change in fields.items():
        folder = base / "recipes" / name.replace("/", "_")
        folder.mkdir(parents=True)
        path = _recipe(folder, **change)
        _case(rows, "recipe field", name, _expect(recipe.RecipeError, lambda p=path: recipe.load("minigo", p)))
    # planning with such a recipe: stops before any job, nothing named ESC anywhere
    work = base / "recipes" / "a" / "b" / "c" / "work"
    bad = _recipe(base / "recipes", extract={"archive": "ok.tar", "into": "../../../ESC"})
    proc = _smk(work, "-n", "--configfile", str(REPO / "config" / "test.yaml"), "--config", "only=[minigo]",
                f"benchmarks={{minigo: {{data: {{recipe: {bad}}}}}}}")
    _case(rows, "recipe field", "snakemake -n with into ../../../ESC",
          {"verdict": "refused" if proc.returncode and "must stay inside" in proc.stderr + proc.stdout else "accepted",
           "crash": "Traceback" in proc.stderr}, outside=len(list(base.rglob("ESC"))))
    # a shared data_root: a mirror's recipe (other URLs) and another recipe, beside a folder the first one made
    source = {"file": "ok.tar", "url": "http://127.0.0.1:9/ok.tar", "hash": "sha256:" + "a" * 64}
    shared, made = base / "shared", []
    recipes = {name: recipe.load("minigo", _recipe(_mkdir(base / "recipes" / name), sources=[src], **extra))
               for name, src, extra in (("first", source, {}),
                                        ("mirror", {**source, "url": "https://mirror.example/ok.tar"}, {}),
                                        ("other", source, {"extract": {"archive": "ok.tar", "into": "sub"}}))}

    def make(folder: Path) -> None:
        (folder / "x").write_text("made")
        made.append(folder)

    def build(name: str) -> None:
        steps._build(recipes[name], shared, "extracted", ("sources", "extract"), 0, make, base / "receipt.json")

    build("first")
    mirror = _expect(DatasetError, lambda: build("mirror"))
    _case(rows, "shared data_root", "a mirror's recipe (other URLs)",
          {**mirror, "verdict": "reused" if mirror["verdict"] == "accepted" and len(made) == 1 else mirror["verdict"]},
          want="reused")
    _case(rows, "shared data_root", "another recipe, folder in use", _expect(DatasetError, lambda: build("other")),
          rebuilt_in_place=len(made) - 1)
    # data: {path: DIR} whose manifest verifies nothing of DIR
    for name, listing in {"empty manifest": "", "manifest naming ../../../etc/hostname":
                          f"{'0' * 64}  ../../../etc/hostname\n"}.items():
        folder = base / "given" / name.replace(" ", "_").replace("/", "_") / "prepared"
        folder.mkdir(parents=True)
        (folder / MANIFEST).write_text(listing)
        _case(rows, "given dataset", name, _expect(DatasetError, lambda f=folder: steps.adopt(f, f.parent / "r.json")))


def locks(base: Path, rows: list[dict[str, Any]]) -> None:
    """A second user of a shared data_root (nobody, forked) and a file system without locks."""
    from mlrepro.datasets import steps
    from mlrepro.datasets.fetch import DatasetError
    from tests.test_hostile import second_user_takes_the_lock

    root = Path(tempfile.mkdtemp(prefix="mlrepro-shared-", dir="/tmp"))
    root.chmod(0o755)
    try:
        early, answer = second_user_takes_the_lock(root)
        _case(rows, "lock", "second user, 0644 lock file",
              {"verdict": "waited for the lock" if not early and answer == "locked" else f"went on ({answer})",
               "crash": answer not in ("locked",) and not early}, want="waited for the lock")
    finally:
        shutil.rmtree(root)
    real = fcntl.flock

    def refuse(fd: Any, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    fcntl.flock = refuse  # the kernel's answer on NFS without lockd, injected
    try:
        def take() -> None:
            with steps.locked(base / "nolocks"):
                pass
        _case(rows, "lock", "flock answers ENOLCK", _expect(DatasetError, take))
    finally:
        fcntl.flock = real


def names(rows: list[dict[str, Any]]) -> None:
    from mlrepro import config as mlconfig

    for key, value in (("org", ".."), ("org", "."), ("system", "..")):
        _case(rows, "name", f"{key}: {value!r}", _expect(mlconfig.ConfigError, lambda k=key, v=value: mlconfig.load(
            {"benchmarks": {"resnet": {}}, k: v})))


def _package(root: Path, config_extra: str = "", script_extra: str = "") -> Path:
    """A vendor-style package (tests/fixtures/outside_impl) with one submitted result and a verified manifest."""
    from mlrepro.package import provenance
    from tests.conftest import write_mllog
    from tests.test_implementations import OUTSIDE

    org = root / "org"
    write_mllog(org / "results" / "sys1" / "resnet" / "result_0.txt", "resnet", 1_000_000, 1.0, seed=7)
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "sys1.json").write_text(json.dumps({"division": "open", "accelerators_per_node": 0}))
    impl = Path(shutil.copytree(OUTSIDE, org / "benchmarks" / "resnet" / "implementations" / "impl"))
    (impl / "config_sys1.sh").write_text((OUTSIDE / "config_CPU.sh").read_text() + config_extra)
    script = (OUTSIDE / "run_and_time.sh").read_text()
    (impl / "run_and_time.sh").write_text(script.replace("set -euo pipefail\n", "set -euo pipefail\n" + script_extra))
    provenance.write(org, {"files": provenance.package_files(org)})
    return org


def reproduce(base: Path, rows: list[dict[str, Any]], socket: str | None) -> None:
    from mlrepro.reproduce import plan, stage, verify
    from mlrepro.reproduce.errors import ReproduceError
    from tests.test_implementations import _points
    from tests.test_reproduce import held

    data = _points(base / "data")
    canary = base / "CANARY"
    org = _package(base / "inert")
    config = org / "benchmarks" / "resnet" / "implementations" / "impl" / "config_sys1.sh"
    # edited after packaging: sourced, it would make the canary and write into the package
    config.write_text(config.read_text() + f"$(touch {canary})\nexport X=`touch {canary}`\n"
                                           f"echo written > {org / 'written'}\n")
    before = _snapshot(org)
    cfg = ["--config", f"reproduce={org}", "system=sys1", "only=[resnet]", "runs=1",
           f"benchmarks={{resnet: {{data_dir: {data}}}}}"]
    for flag in ("-n", "--list-rules", "--summary", "--dag"):
        work = base / "inert" / "work"
        proc = _smk(work, *cfg, flag)
        _case(rows, "reproduce planning", f"hostile config file, {flag}",
              {"verdict": "inert" if proc.returncode == 0 else f"exit {proc.returncode}",
               "crash": "Traceback" in proc.stderr}, want="inert", planning_commands=int(canary.exists()),
              outside=int(_snapshot(org) != before) + len(_files(work / "reproduction")))
        canary.unlink(missing_ok=True)
    proc = _smk(org / "benchmarks", *cfg, "-n")
    _case(rows, "reproduce planning", "working folder inside the package",
          {"verdict": "refused" if proc.returncode and "lies inside the package" in proc.stderr + proc.stdout
           else "accepted", "crash": "Traceback" in proc.stderr}, planning_commands=int(canary.exists()),
          outside=int(_snapshot(org) != before))
    proc = _smk(base / "inert" / "work2", *cfg, "outdir=elsewhere", "-n")
    _case(rows, "reproduce planning", "outdir given",
          {"verdict": "refused" if proc.returncode and "give reproduce_out=elsewhere" in proc.stderr + proc.stdout
           else "ignored", "crash": "Traceback" in proc.stderr})
    # a real run of this package: its config file was edited after packaging, so nothing of it runs
    proc = _smk(base / "inert" / "work3", *cfg)
    _case(rows, "reproduce", "config file edited after packaging",
          {"verdict": "refused" if proc.returncode and "does not match its provenance.json" in proc.stderr + proc.stdout
           else "ran", "crash": "Traceback" in proc.stderr}, planning_commands=int(canary.exists()),
          outside=int(_snapshot(org) != before))
    # a result whose name is not UTF-8, added after packaging: named by the package check, escaped
    o = _package(base / "utf8")
    shutil.copy(o / "results/sys1/resnet/result_0.txt", o / "results/sys1/resnet" / os.fsdecode(b"result_\xff.txt"))
    proc = _smk(base / "utf8" / "work", "--config", f"reproduce={o}", "system=sys1", "only=[resnet]", "runs=1",
                f"benchmarks={{resnet: {{data_dir: {data}}}}}")
    _case(rows, "reproduce", "result name that is not UTF-8",
          {"verdict": "refused" if proc.returncode and "result_\\udcff.txt is in the package but not in the manifest"
           in proc.stderr else f"exit {proc.returncode}", "crash": "Traceback" in proc.stderr or
           "UnicodeEncodeError" in proc.stderr})
    # two reproductions, one reproduce_out
    shared = base / "shared_out"
    with held(shared):
        clean = _package(base / "clean")
        proc = _smk(base / "second", "--config", f"reproduce={clean}", "system=sys1", "only=[resnet]", "runs=1",
                    f"benchmarks={{resnet: {{data_dir: {data}}}}}", f"reproduce_out={shared}")
        _case(rows, "reproduce", "second reproduction into a reproduce_out in use",
              {"verdict": "refused" if proc.returncode and "in use by another" in proc.stderr + proc.stdout
               else "ran", "crash": "Traceback" in proc.stderr})
    # files that would hang or crash the readers, and a device in the implementation folder
    hostile: dict[str, Callable[[Path], None]] = {
        "result symlinked to /dev/zero": lambda o: _replace(o / "results/sys1/resnet/result_0.txt",
                                                            lambda p: p.symlink_to("/dev/zero")),
        "result that is a FIFO": lambda o: _replace(o / "results/sys1/resnet/result_0.txt", os.mkfifo),
        "3 GB sparse provenance.json": lambda o: os.truncate(o / "provenance.json", 3 << 30),
        "provenance.json nested 100,000 deep": lambda o: (o / "provenance.json").write_bytes(
            b"[" * 100_000 + b"]" * 100_000),
        "MLLOG line nested 100,000 deep": lambda o: (o / "results/sys1/resnet/result_0.txt").write_text(
            ':::MLLOG {"key": "seed", "value": ' + "[" * 100_000 + "]" * 100_000 + "}\n"),
    }
    for n, (name, make) in enumerate(hostile.items()):
        o = _package(base / f"reads{n}")
        make(o)
        _case(rows, "reproduce reading", name, _expect(ReproduceError, lambda o=o: (
            plan.plan(o, system="sys1", only=["resnet"], runs=1, overrides={}, default_data_seed=1,
                      data_dirs={"resnet": str(data)}), verify.before(o))))
    o = _package(base / "sparse")
    (o / "provenance.json").unlink()
    _sparse(o / "benchmarks" / "resnet" / "implementations" / "impl" / "weights.bin")
    _case(rows, "reproduce reading", "3 GB sparse file in the package",
          _expect(ReproduceError, lambda: verify.before(o)))
    o = _package(base / "device")
    impl = o / "benchmarks" / "resnet" / "implementations" / "impl"
    os.mknod(impl / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    _case(rows, "reproduce reading", "character device in the implementation",
          _expect(ReproduceError, lambda: stage.stage(impl, base / "device" / "staged")),
          outside=len(_files(base / "device" / "staged")))
    o = _package(base / "edited")
    (o / "results/sys1/resnet/result_0.txt").write_text((o / "results/sys1/resnet/result_0.txt").read_text() + "\n")
    _case(rows, "reproduce", "result edited after packaging", _expect(ReproduceError, lambda: verify.before(o)))
    hostile_runs(base, rows, data, socket)


def _mkdir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _sparse(path: Path, size: int = 3 << 30) -> None:
    with path.open("wb") as f:
        f.truncate(size)


def _replace(path: Path, make: Callable[[Path], Any]) -> None:
    path.unlink()
    make(path)


def hostile_runs(base: Path, rows: list[dict[str, Any]], data: Path, socket: str | None) -> None:
    """A real reproduction of a package whose config file and run_and_time.sh write into the package, into $HOME
    and into a folder outside: natively (reported as an error) and in Podman (refused there)."""
    engines: dict[str, dict[str, Any]] = {"native": {}}
    if socket:
        from mlrepro.engines.client import connect
        from tests.localbase import ensure_base_image

        ref = ensure_base_image(connect("podman", socket), workdir=base)["ref"]
        engines["podman"] = {"engine": "podman", "engine_socket": socket, "build_args": {"FROM_IMAGE_NAME": ref},
                             "image_tag_prefix": "localhost/mlrepro-faults-"}
    for engine, options in engines.items():
        root = base / f"run_{engine}"
        home, outside = root / "home", root / "outside"
        home.mkdir(parents=True)
        outside.mkdir()
        org_path = root / "org"
        attempts = "".join(f'(echo hostile >> "{t}") 2>/dev/null || true\n' for t in (
            org_path / "benchmarks/resnet/implementations/impl/train.py", org_path / "written_by_package",
            "$HOME/canary", outside / "canary"))
        org = _package(root, attempts, attempts)
        before = _snapshot(org)
        work = root / "work"
        work.mkdir()
        (work / "cfg.yaml").write_text(json.dumps({
            "reproduce": str(org), "system": "sys1", "only": ["resnet"], "runs": 1, "telemetry": {"enabled": False},
            "benchmarks": {"resnet": {"data_dir": str(data)}}, **options}))
        t = time.monotonic()
        proc = subprocess.run([*SNAKEMAKE, "--directory", str(work), "--configfile", str(work / "cfg.yaml")],
                              cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                              env={**os.environ, "HOME": str(home)})
        changed = sorted(set(_snapshot(org).items()) ^ set(before.items()))
        changed_files = len({k for k, _ in changed})
        reported = proc.returncode != 0 and "changed while it was reproduced" in proc.stderr
        outside_files = (home / "canary").exists() + (outside / "canary").exists()  # (Snakemake caches in $HOME)
        if engine == "native":
            verdict = "reported as an error" if changed_files and reported else (
                "unchanged" if not changed_files else "changed, NOT reported")
            want = "reported as an error"
        else:
            verdict = "unchanged" if not changed_files and proc.returncode == 0 else f"exit {proc.returncode}"
            want = "unchanged"
        _case(rows, "reproduction run", f"hostile code, engine {engine}",
              {"verdict": verdict, "crash": "Traceback" in proc.stderr, "seconds": round(time.monotonic() - t, 1)},
              want=want, package_files_changed=changed_files, package_change_reported=reported,
              # natively nothing can stop the user's own rights (the warning says so): counted apart
              **({"outside": outside_files} if engine != "native" else {"native_writes_outside": outside_files}))


def audit(base: Path, rows: list[dict[str, Any]]) -> None:
    from mlrepro.audit import discover, manifest, scoring
    from mlrepro.package import provenance
    from mlrepro.package.provenance import MANIFEST
    from tests.test_audit_hostile_files import HOSTILE

    for name, (make, _) in sorted(HOSTILE.items()):
        folder = base / "audit_files" / name.replace(" ", "_").replace("/", "_")
        (folder / "systems").mkdir(parents=True)
        make(folder / MANIFEST)
        check: dict[str, Any] = {}

        def verify(f: Path = folder, into: dict[str, Any] = check) -> None:
            into["error"] = any(x.severity == "error" for x in manifest.verify(f).findings)
        result = _expect((), verify)
        _case(rows, "audit", f"provenance.json: {name}",
              {**result, "verdict": "error verdict" if check.get("error") else result["verdict"]}, want="error verdict")
        make(folder / "systems" / "sys.json")
        org = discover.Org("Mallory", folder, [discover.SystemDir("sys", folder / "results" / "sys", [])], [])
        result = _expect((), lambda o=org: scoring.load_system_desc(o, o.systems[0]))
        _case(rows, "audit", f"system JSON: {name}", {**result, "verdict": "verdict" if not result["crash"]
                                                        else result["verdict"]}, want="verdict")
    big = base / "audit_big"
    _sparse(_mkdir(big / "results") / "big.bin", 1)
    provenance.write(big, {"files": provenance.package_files(big)})
    _sparse(big / "results" / "big.bin")
    t = time.monotonic()
    found = manifest.verify(big, max_bytes=256 << 20).findings
    _case(rows, "audit", "3 GB sparse file under a manifest",
          {"verdict": "error verdict, not hashed" if [f.kind for f in found if f.severity == "error"] ==
           ["file too large to verify"] else "hashed", "crash": False, "seconds": round(time.monotonic() - t, 2)},
          want="error verdict, not hashed")
    missing = manifest.verify(base / "audit_files", "ab" * 32)
    _case(rows, "audit", "manifest deleted, published hash given",
          {"verdict": "error verdict" if any(f.severity == "error" for f in missing.findings) else "passed",
           "crash": False}, want="error verdict")
    link = base / "audit_link" / "Mallory"
    (link / "systems").mkdir(parents=True)
    (link / "results").symlink_to("/etc")
    [found] = discover.find_orgs(link)
    _case(rows, "audit", "results symlinked to /etc",
          {"verdict": "not followed" if not found.systems else f"followed ({len(found.systems)} systems)",
           "crash": False}, want="not followed")
    root = base / "round"
    shutil.copytree(REPO / "tests" / "fixtures" / "audit" / "round", root)
    results = next((root / "Baidu" / "results").iterdir())
    shutil.copytree(results, results.with_name(os.fsdecode(b"system_\xfe")))
    shutil.copytree(root / "Google", root / os.fsdecode(b"Org_\xfe"))
    out = base / "audit_out"
    crash = False
    for step in ("check", "summarize"):
        p = subprocess.run([sys.executable, "-m", "mlrepro.audit", step, "--root", str(root), "--out", str(out),
                            "--ruleset", "1.1.0", "--jobs", "1"], capture_output=True, text=True, check=False, cwd=REPO)
        crash |= p.returncode != 0
    _case(rows, "audit", "names that are not UTF-8",
          {"verdict": "audited, escaped" if "Org_\\udcfe" in (out / "summary.csv").read_text(errors="replace")
           else "missing", "crash": crash}, want="audited, escaped")
    proc = _smk(base / "audit_utf8", "--config", f"audit={root}", f"audit_out={base / 'audit_utf8' / 'out'}",
                "ruleset=1.1.0")
    summary = base / "audit_utf8" / "out" / "summary.csv"
    _case(rows, "audit", "names that are not UTF-8, through Snakemake",
          {"verdict": "audited, escaped" if proc.returncode == 0 and "Org_\\udcfe" in summary.read_text() else
           f"exit {proc.returncode}", "crash": "Traceback" in proc.stderr or "UnicodeEncodeError" in proc.stderr},
          want="audited, escaped")
    many_tiny_files(base, rows)
    before = _files(root)
    for where, out_dir in (("inside the package", root / "Baidu" / "audit"), ("holding the package", base)):
        proc = _smk(base / "audit_work", "--config", f"audit={root}", f"audit_out={out_dir}", "ruleset=1.1.0")
        _case(rows, "audit", f"audit_out {where}",
              {"verdict": "refused" if proc.returncode else "ran", "crash": "Traceback" in proc.stderr},
              outside=len(before ^ _files(root)))


def many_tiny_files(base: Path, rows: list[dict[str, Any]], count: int = 100_000) -> None:
    """100,000 tiny junk files through Snakemake: every file a verdict in audit.json, the log and the report
    bounded (report.FILES_PER_FINDING rows per folder and finding)."""
    import resource

    from mlrepro.audit import report
    from tests import test_audit_hostile_files as hostile

    work = _mkdir(base / "audit_many")
    root = hostile._many_tiny_files(work, count)
    t = time.monotonic()
    proc = _smk(work, "--config", f"audit={root}", f"audit_out={work / 'out'}", "ruleset=1.1.0")
    seconds = round(time.monotonic() - t, 1)
    verdicts = len(hostile._mallory_files(work / "out")) if proc.returncode == 0 else 0
    report_mb = sum(p.stat().st_size for p in (work / "out" / "report").rglob("*")) / 1e6 if verdicts else 0.0
    log_kb = len(proc.stdout + proc.stderr) / 1e3
    _case(rows, "audit", f"{count:,} tiny files",
          {"verdict": "every file a verdict, report and log bounded" if verdicts == count and report_mb < 1
           and log_kb < 100 else f"{verdicts} verdicts, report {report_mb:.1f} MB, log {log_kb:.0f} kB",
           "crash": "Traceback" in proc.stderr, "seconds": seconds, "log_kb": round(log_kb, 1),
           "report_mb": round(report_mb, 2), "rows_per_finding": report.FILES_PER_FINDING,
           # the largest process this benchmark has waited for so far (the audit's steps are among them)
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)},
          want="every file a verdict, report and log bounded")


def run(base: Path) -> list[dict[str, Any]]:
    """Every case, in ``base``; the rows and, last, the closing figures."""
    sys.path.insert(0, str(REPO))
    socket = os.environ.get("MLREPRO_PODMAN_SOCKET")
    rows: list[dict[str, Any]] = []
    for section in (lambda: datasets(base, rows), lambda: locks(base, rows), lambda: names(rows),
                    lambda: reproduce(base, rows, socket), lambda: audit(base, rows)):
        section()
    return rows


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [r for r in rows if r["group"] == "reproduction run"]
    return {
        "hostile_cases_tried": len(rows),
        "as_intended": sum(r["ok"] for r in rows),
        "crashes": sum(bool(r["crash"]) for r in rows),
        "files_written_outside_their_folder": sum(int(r["outside"]) for r in rows),
        "commands_executed_from_a_package_or_recipe_during_planning": sum(int(r["planning_commands"]) for r in rows),
        "package_bytes_changed_by_a_reproduction": {
            r["case"]: f"{r['package_files_changed']} file(s)"
            + (", reported as an error" if r["package_change_reported"] else "") for r in runs},
        "not_as_intended": [f"{r['group']}: {r['case']}: {r['verdict']}" for r in rows if not r["ok"]],
    }
