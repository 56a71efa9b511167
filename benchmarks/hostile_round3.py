"""Issue 36's cases (a shared cluster login node), each tried on the real code, with its closing figures.

    sudo python benchmarks/hostile_round3.py          (a minute or two; root: it makes a second local user)
    python benchmarks/fault_matrix.py --round3         (the same, from the fault matrix)

A second local user (``useradd``, removed at the end) plays the attacker: what they plant is theirs (made as
root, then chowned to them, as they would have made it). Per case: what happened and, counted for the closing
note, code the attacker planted that ran as the victim, code run from a package or working folder (canary
modules that record being imported), poisoned inputs a pipeline used, audits one entry stopped, and numbers that
are not finite (or beyond any real measurement) ranked in an audit's tables.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PY = [sys.executable, "-P"]


@contextlib.contextmanager
def attacker() -> Iterator[tuple[str, int, int]]:
    name = f"mlr{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
                   check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    try:
        yield name, entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


def _give(path: Path, user: tuple[str, int, int], mode: int | None = None) -> None:
    os.lchown(path, user[1], user[2])
    if mode is not None and not path.is_symlink():
        path.chmod(mode)


def _row(rows: list[dict[str, Any]], group: str, case: str, **counts: Any) -> None:
    rows.append({"group": group, "case": case, **counts})
    print(json.dumps(rows[-1]), flush=True)


# --- item 1: the warm start's folder ------------------------------------------------------------------------------

PLANTED = "#!/bin/sh\necho planted >> {mark}\nexec {python} \"$@\"\n"


def warm_cases(base: Path, user: tuple[str, int, int], rows: list[dict[str, Any]]) -> None:
    """The victim's run driver asks for its warm shim (warm.shim_env) and starts its run script with that PATH,
    as mlrepro/runs/driver.py does; and a job hands over to its warm parent (warm.hand_over's path)."""
    import hashlib

    from mlrepro.runs import warm

    for plant in ("shared /tmp-like folder, 88bb1f7's layout", "runtime base made by the attacker",
                  "leaf made by the attacker", "leaf mode 777", "leaf a symlink to the attacker's folder",
                  "leaf a plain file", "socket of the attacker's listener in a planted leaf"):
        case = base / f"warm-{uuid.uuid4().hex[:6]}"
        case.mkdir(mode=0o700)
        mark = case / "ran"
        env = {**os.environ, "XDG_RUNTIME_DIR": str(case / "run"), warm.OWNER_ENV: warm.owner_here()}
        env.pop(warm.DIR_ENV, None)
        (case / "run").mkdir(mode=0o700)
        old = {k: os.environ.get(k) for k in ("XDG_RUNTIME_DIR", warm.OWNER_ENV, warm.DIR_ENV)}
        os.environ.update({k: v for k, v in env.items() if k in old})
        os.environ.pop(warm.DIR_ENV, None)
        connected = threading.Event()
        try:
            if plant.startswith("shared"):
                shared = case / "tmp"
                shared.mkdir()
                shared.chmod(0o1777)
                os.environ[warm.DIR_ENV] = str(shared)
                key = f"{os.environ[warm.OWNER_ENV]}\0{sys.executable}\0{os.environ.get('PYTHONPATH', '')}"
                leaf = shared / f"mlrepro-warm-{os.getuid()}" / hashlib.sha256(key.encode()).hexdigest()[:12]
            else:
                leaf = warm.parent_dir(os.environ[warm.OWNER_ENV])
            if not leaf.is_relative_to(case):  # an older layout (88bb1f7: /tmp) is tried by the first case only
                _row(rows, "warm start", plant, verdict=f"not tried: this code's folder is {leaf}")
                continue
            if "runtime base" in plant:  # parent_dir made it: the attacker's comes first instead
                leaf.parent.parent.rmdir()
                leaf.parent.parent.mkdir(mode=0o777)
                _give(leaf.parent.parent, user, 0o777)
            leaf.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if "symlink" in plant:
                theirs = case / "theirs"
                theirs.mkdir()
                (theirs / "python").write_text(PLANTED.format(mark=mark, python=sys.executable))
                (theirs / "python").chmod(0o755)
                _give(theirs, user, 0o777)
                leaf.symlink_to(theirs)
            elif "plain file" in plant:
                leaf.write_text("")
                _give(leaf, user)
            else:
                leaf.mkdir(parents=True, exist_ok=True)
                (leaf / "python").write_text(PLANTED.format(mark=mark, python=sys.executable))
                (leaf / "python").chmod(0o755)
                if "socket" in plant:
                    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    listener.bind(str(leaf / "parent.sock"))
                    listener.listen(1)
                    listener.settimeout(20)

                    def serve(s: socket.socket = listener, seen: threading.Event = connected) -> None:
                        with contextlib.suppress(OSError):
                            s.accept()
                            seen.set()

                    threading.Thread(target=serve, daemon=True).start()
                for p in (leaf / "python", leaf, leaf.parent):
                    _give(p, user, 0o777 if p.is_dir() else 0o755)
                if "mode 777" in plant:
                    os.lchown(leaf, os.getuid(), os.getgid())
            path = warm.shim_env("/usr/bin:/bin").get("PATH", "/usr/bin:/bin")
            subprocess.run(["bash", "-c", "python -P -c pass"], env={**os.environ, "PATH": path}, check=False,
                           capture_output=True, timeout=60)
            if "socket" in plant:  # a job handing over (warm.hand_over) to the parent of that folder
                warm._through_parent(leaf, warm.MODULE, ["--help"], dict(os.environ))
            ran = mark.exists() or connected.is_set()
            _row(rows, "warm start", plant, code_executed_as_another_user=int(ran),
                 verdict="planted code ran" if ran else "refused; the run went cold")
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


# --- item 2: canaries in the working folder ------------------------------------------------------------------------

CANARY = "open({mark!r}, 'a').write(__name__ + '\\n')\n"


def _train_command() -> str:
    """The interpreter command of resnet's run_and_time.sh (``exec python ... -m mlrepro.train``), as it stands."""
    line = next(ln for ln in (REPO / "workflows" / "resnet" / "run_and_time.sh").read_text().splitlines()
                if ln.startswith("exec python"))
    return line[: line.index("mlrepro.train") + len("mlrepro.train")]


def canary_cases(base: Path, rows: list[dict[str, Any]]) -> None:
    """Every Python entry point started from a folder (an audited round) holding mlrepro/, mlperf_logging/, pip/
    and pynvml.py canaries."""
    from mlrepro.audit.steps import Step, _compare
    from mlrepro.core import probe, versions
    from mlrepro.package import assemble
    from mlrepro.telemetry import start_sampler
    from tests.conftest import dispatch, make_job

    work = base / "round-with-canaries"
    mark = base / "canaries-imported"
    for package in ("mlrepro", "mlperf_logging", "pip"):
        (work / package).mkdir(parents=True)
        (work / package / "__init__.py").write_text(CANARY.format(mark=str(mark)))
    (work / "pynvml.py").write_text(CANARY.format(mark=str(mark)))
    (base / "logging").mkdir()
    here = os.getcwd()
    os.chdir(work)
    cases = {
        "audit_logging= (isolated re-run)": lambda: versions.run_isolated(base / "logging",
                                                                          ["-m", "mlrepro.audit", "--help"]),
        "audit_logging_compare= (compare re-run)": lambda: _compare(Step(
            "summarize", work, base / "cmp", "1.1.0", max_file_mb=1.0, compare_logging="installed")),
        "package checker": lambda: assemble.check(work, "training", "1.1.0"),
        "pip freeze (environment record)": probe.pip_freeze,
        "a rule's job (rules/dispatch.py, as Snakemake runs it here)": lambda: dispatch(work, make_job(
            "inference_audit", params={"root": work, "out": base / "iaudit"}, log=base / "iaudit.log"),
            extra_path=[str(work)]),
        "telemetry sampler (NVML)": lambda: start_sampler(base / "telemetry", hz=10, backend="nvml").stop(),
        "mini run_and_time.sh's exec line": lambda: subprocess.run(
            ["bash", "-c", _train_command() + " --help"],
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
            capture_output=True, check=False),
    }
    try:
        for name, call in cases.items():
            before = mark.read_text().split() if mark.exists() else []
            with contextlib.suppress(Exception):
                call()
            after = mark.read_text().split() if mark.exists() else []
            _row(rows, "working folder", name, code_executed_from_package_or_working_folder=len(after) - len(before),
                 verdict=f"imported {after[len(before):]}" if len(after) > len(before) else "none imported")
    finally:
        os.chdir(here)


# --- item 4: a shared data_root ------------------------------------------------------------------------------------


def data_cases(base: Path, user: tuple[str, int, int], rows: list[dict[str, Any]]) -> None:
    from mlrepro.datasets import recipe, stamps, steps
    from mlrepro.datasets.manifest import MANIFEST
    from tests import dataset_sources as src
    from tests.conftest import make_job

    plants = ("a file beyond the manifest", "a listed file changed", "manifest rewritten by the attacker",
              "the whole folder made by the attacker, digest and manifest consistent")
    with src.serving() as server:
        for plant in plants:
            tmp = base / f"data-{uuid.uuid4().hex[:6]}"
            files = src.minigo()
            path = src.recipe_for("minigo", server, tmp, files, src.EXTRA["minigo"])
            r = recipe.load("minigo", path)
            root = tmp / "data_root" / "minigo"
            steps.download(r, root, tmp / "d.json", progressbar=False)
            steps.verify(r, root, tmp / "v.json")
            steps.extract(r, root, tmp / "e.json")
            steps.prepare_step(r, root, tmp / "p.json")
            prepared = root / "prepared"
            victim = next(p for p in sorted(prepared.rglob("*")) if p.is_file() and p.name != MANIFEST
                          and not p.name.startswith("."))
            poison = b"POISON"
            if plant.startswith("a file beyond"):
                target = prepared / "POISON.JPEG"
                target.write_bytes(poison)
            else:
                target = victim
                victim.write_bytes(poison)
            if "attacker" in plant:
                stamps.write_manifest(prepared)  # consistent with the poison
                for p in ([prepared, *prepared.rglob("*")] if "whole folder" in plant else [prepared / MANIFEST]):
                    _give(p, user)
            job = make_job("data_prepare", input={"recipe": path}, output={"receipt": tmp / "p2.json"},
                           params={"step": "prepare", "root": root, "group": "", "locked": False},
                           wildcards={"benchmark": "minigo"})
            proc = subprocess.run([*PY, "-m", "mlrepro.jobs"], input=job.to_json(), capture_output=True, text=True,
                                  check=False, timeout=300)
            used = target.exists() and target.read_bytes() == poison
            _row(rows, "data_root", plant, poisoned_inputs_used=int(used),
                 verdict=("poison used" if used else "moved aside and rebuilt" if "building it anew" in proc.stderr
                          else f"rc {proc.returncode}: {proc.stderr[-200:]}"))


# --- item 5: the inference audit ---------------------------------------------------------------------------------

SUMMARY = ("================================================\nMLPerf Results Summary\n"
           "================================================\nSUT name : X\nScenario : Offline\n"
           "Mode     : PerformanceOnly\nSamples per second: {value}\nResult is : VALID\n"
           "  Min duration satisfied : Yes\n  Min queries satisfied : Yes\n\nNo errors encountered during test.\n")
LIMIT = 1e15  # beyond any real measurement (mlrepro.inference.summary.MAX_METRIC)


def _inference_round(root: Path, system_json: str, value: str) -> None:
    org = root / "closed" / "Org"
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "good.json").write_text('{"accelerators_per_node": 2, "accelerator_model_name": "A"}')
    (org / "systems" / "hostile.json").write_text(system_json)
    for system, bench, v in (("good", "resnet50", "1000"), ("good", "bert-99", value), ("hostile", "resnet50", "5")):
        d = org / "results" / system / bench / "Offline" / "performance" / "run_1"
        d.mkdir(parents=True)
        (d / "mlperf_log_summary.txt").write_text(SUMMARY.format(value=v))


def _ranked(out: Path) -> int:
    """Numbers in the audit's tables that are not finite or beyond any real measurement; a file that is not
    strict JSON counts each NaN/Infinity it holds."""
    bad = 0
    text = (out / "inference_results.json").read_text() if (out / "inference_results.json").exists() else ""
    bad += sum(text.count(w) for w in ("NaN", "Infinity"))
    for table in ("inference_seed_table.csv", "inference_table.csv"):
        path = out / table
        for line in (path.read_text().splitlines()[1:] if path.exists() else []):
            for cell in line.split(","):
                with contextlib.suppress(ValueError):
                    v = float(cell)
                    bad += int(not math.isfinite(v) or abs(v) > LIMIT)
    return bad


def inference_cases(base: Path, rows: list[dict[str, Any]]) -> None:
    cases = {
        "accelerators_per_node: Infinity": ('{"accelerators_per_node": Infinity}', "1000"),
        'accelerators_per_node: "1e400"': ('{"accelerators_per_node": "1e400"}', "1000"),
        "accelerators_per_node: NaN": ('{"accelerators_per_node": NaN}', "1000"),
        "system JSON nested 200,000 deep": ('{"accelerators_per_node": 1, "x": ' + "[" * 200_000 + "]" * 200_000
                                            + "}", "1000"),
        "Samples per second: inf": ('{"accelerators_per_node": 1}', "inf"),
        "Samples per second: nan": ('{"accelerators_per_node": 1}', "nan"),
        "Samples per second: 1e308": ('{"accelerators_per_node": 1}', "1e308"),
        "Samples per second: -5": ('{"accelerators_per_node": 1}', "-5"),
        "Samples per second: 1e400": ('{"accelerators_per_node": 1}', "1e400"),
        "a division folder that is a symlink": ('{"accelerators_per_node": 1}', "1000"),
    }
    for name, (system_json, value) in cases.items():
        root, out = base / f"iround-{uuid.uuid4().hex[:6]}", base / f"iout-{uuid.uuid4().hex[:6]}"
        _inference_round(root, system_json, value)
        if "symlink" in name:
            elsewhere = base / f"elsewhere-{uuid.uuid4().hex[:6]}"
            _inference_round(elsewhere / "x", '{"accelerators_per_node": 1}', "9e14")
            (root / "open").symlink_to(elsewhere / "x" / "closed")
        proc = subprocess.run([*PY, "-m", "mlrepro.inference.audit", "--root", str(root), "--out", str(out)],
                              capture_output=True, text=True, check=False, timeout=300)
        stopped = proc.returncode != 0 or not (out / "inference_results.json").exists()
        ranked = _ranked(out)
        followed = 0
        if "symlink" in name and not stopped:
            followed = int("9e+14" in (out / "inference_results.json").read_text()
                           or "900000000000000" in (out / "inference_results.json").read_text())
        last = proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else f"rc {proc.returncode}"
        _row(rows, "inference audit", name, audits_stopped_by_one_entry=int(stopped),
             non_finite_numbers_ranked=ranked + followed,
             verdict=f"stopped: {last}" if stopped else "every entry its own verdict")


# --- item 6: config and environment --------------------------------------------------------------------------------


def config_cases(base: Path, rows: list[dict[str, Any]]) -> None:
    import yaml

    from mlrepro import config as mlconfig

    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name, change in (("org with a final newline", {"org": "abc\n"}), ("seed 2^64", {"seed": 2**64}),
                         ("threads_per_run 1e20", {"threads_per_run": 10**20}),
                         ("telemetry.hz 1e-300", {"telemetry": {"hz": 1e-300}})):
        try:
            mlconfig.load({**default, **change}, "config.yaml")
            verdict = "accepted"
        except mlconfig.ConfigError as e:
            verdict = "refused: " + str(e).splitlines()[-1].strip()[:120]
        _row(rows, "config", name, verdict=verdict, accepted=int(verdict == "accepted"))
    levels = ['a0: &a0 ["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    doc = yaml.safe_load("anchors:\n" + "\n".join(f"  {line}" for line in levels) + "\norg: *a7\n")
    try:
        mlconfig.load({**default, "org": doc["org"]}, "config.yaml")
        size = 0
    except mlconfig.ConfigError as e:
        size = len(str(e))
    _row(rows, "config", "YAML anchors, 7 levels, in a wrongly typed value", message_bytes=size,
         accepted=int(size == 0), verdict=f"refused, message of {size} bytes")
    # through Snakemake itself: a template config file, and MLREPRO_AUTO_SYSTEM leaving the outdir
    work = base / "smk"
    work.mkdir()
    mark = base / "template-ran"
    (work / "tpl.yaml").write_text(f"__use_yte__: true\norg: ?open({str(mark)!r}, 'w').write('x') and 'evil'\n")
    smk = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
           "--cores", "1", "-n"]
    proc = subprocess.run([*smk, "--configfile", str(work / "tpl.yaml")], capture_output=True, text=True,
                          check=False, timeout=600)
    refused = proc.returncode != 0 and "allow_templates=true" in proc.stdout + proc.stderr
    _row(rows, "config", "__use_yte__ template config (snakemake -n)", accepted=int(not refused),
         template_expression_ran_while_snakemake_loaded_it=int(mark.exists()),
         verdict="planning refused it" if refused else f"rc {proc.returncode}")
    proc = subprocess.run(smk, capture_output=True, text=True, check=False, timeout=600,
                          env={**os.environ, "MLREPRO_AUTO_SYSTEM": "../../../x"})
    refused = proc.returncode != 0 and "MLREPRO_AUTO_SYSTEM" in proc.stdout + proc.stderr
    _row(rows, "config", "MLREPRO_AUTO_SYSTEM=../../../x", accepted=int(not refused),
         verdict="refused naming the variable" if refused else f"rc {proc.returncode}")


# --- items 3 and 7: .ci/podman.sh, the ledger, a failed step's log on a full disk ---------------------------------


def ci_and_fault_cases(base: Path, user: tuple[str, int, int], rows: list[dict[str, Any]]) -> None:
    from tests.conftest import dispatch, make_job

    victim = subprocess.Popen(["sleep", "300"])
    try:
        for plant in ("attacker's state folder with a pid file", "own folder, pid file naming another process"):
            state = base / f"podman-{uuid.uuid4().hex[:6]}"
            if plant.startswith("attacker"):
                state.mkdir()
                (state / "service.pid").write_text(f"{victim.pid}\n")
                _give(state, user, 0o777)
            else:
                state.mkdir(mode=0o700)
                start = Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
                (state / "service.pid").write_text(f"{victim.pid} {start}\n")
            subprocess.run(["bash", str(REPO / ".ci" / "podman.sh"), "stop"], capture_output=True, check=False,
                           env={**os.environ, "MLREPRO_PODMAN_STATE": str(state)}, timeout=60)
            time.sleep(0.2)
            _row(rows, ".ci/podman.sh", plant, killed_a_process_of_the_attackers_choice=int(victim.poll() is not None),
                 verdict="refused" if victim.poll() is None else "killed it")
    finally:
        victim.kill()
        victim.wait()
    full = base / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], capture_output=True,
                      check=False).returncode != 0:
        _row(rows, "faults", "disk full", verdict="skipped: no tmpfs mount here")
        return
    try:
        ledger = full / "ledger.jsonl"
        ledger.write_text(json.dumps({"event": "launch", "launch": "a", "run": "r"}) + "\n")
        with contextlib.suppress(OSError), (full / "filler").open("wb") as f:
            while True:
                f.write(b"x" * 512)
                f.flush()
        code = ("import sys; from pathlib import Path; from mlrepro.runs import ledger as l\n"
                "l.append(Path(sys.argv[1]), {'event': 'end', 'launch': 'a', 'error': 'x' * 20000})\n")
        proc = subprocess.run([*PY, "-c", code, str(ledger)], capture_output=True, text=True, check=False)
        whole = all(json.loads(line) for line in ledger.read_text().splitlines())
        _row(rows, "faults", "ledger append on a full disk", torn_line=int(not whole),
             verdict=("failed loudly, ledger whole" if proc.returncode != 0 and "LedgerError" in proc.stderr and whole
                      else f"rc {proc.returncode}, whole {whole}"))
        log = full / "compliance.log"
        job = make_job("compliance", input={"result": "/nonexistent"}, output={"verdict": base / "verdict.json"},
                       params={"usage": "training", "ruleset": "2.0.0", "release": None}, log=log)
        proc = dispatch(base, job)
        said = "ENOSPC" in proc.stderr or "full" in proc.stderr or (log.exists() and log.stat().st_size > 0)
        _row(rows, "faults", "compliance failing on a full disk", reason_shown=int(said),
             verdict="the failure names why its log is empty" if said else "no reason shown")
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)


def run(base: Path) -> list[dict[str, Any]]:
    sys.path.insert(0, str(REPO))
    rows: list[dict[str, Any]] = []
    if os.geteuid() != 0 or not shutil.which("useradd"):
        raise SystemExit("hostile_round3: needs root and useradd (it makes a second local user, removed after)")
    with attacker() as user:
        os.chmod(base, 0o711)  # the attacker may reach what they planted, as on a login node
        warm_cases(base, user, rows)
        canary_cases(base, rows)
        data_cases(base, user, rows)
        inference_cases(base, rows)
        config_cases(base, rows)
        ci_and_fault_cases(base, user, rows)
    return rows


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(r.get(key, 0)) for r in rows)

    return {
        "cases_tried": len(rows),
        "code_executed_as_another_user": total("code_executed_as_another_user")
        + total("killed_a_process_of_the_attackers_choice"),
        "code_executed_from_a_package_or_working_folder": total("code_executed_from_package_or_working_folder"),
        "poisoned_inputs_used": total("poisoned_inputs_used"),
        "audits_stopped_by_one_entry": total("audits_stopped_by_one_entry"),
        "non_finite_numbers_ranked": total("non_finite_numbers_ranked"),
        "config_cases_accepted": total("accepted"),
        "template_expressions_run_by_snakemake_before_planning": total(
            "template_expression_ran_while_snakemake_loaded_it"),
        "faults_not_loud": total("torn_line") + sum(1 for r in rows if r.get("reason_shown") == 0),
    }


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="mlrepro-round3-"))
    try:
        rows = run(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(figures(rows), indent=1))


if __name__ == "__main__":
    main()
