"""The fault matrix of issue 9: faults injected into the real pipeline on a tiny config, and what survived.

    python benchmarks/fault_matrix.py [--runs 3] [--seed 1]

Not a test (it takes several minutes). It runs the pipeline once (ResNet, --runs runs), then for each
fault brings the step to be hit back into the DAG, injects the fault at a random moment, checks
that nothing half-written looks complete, runs `snakemake` again and compares every finished result
byte for byte. Then: disk full (a small tmpfs, else RLIMIT_FSIZE), a read-only output folder (a
read-only bind mount, where root may mount), a second invocation on the same output folder,
tampering, hostile logs through the gate, the audit and its report in headless Chromium, hostile
dataset archives through the extraction (``--archives-only``: those alone, in seconds), and every case of
issue 23 with its closing figures (``--round2``: those alone, benchmarks/hostile_round2.py); issue 36's, a
shared login node with a second local user (``--round3``: benchmarks/hostile_round3.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mlrepro.core import integrity  # noqa: E402
from tests.chromium import assert_no_injection  # noqa: E402
from tests.conftest import SYSTEM  # noqa: E402
from tests.test_hostile import _hostile_logs  # noqa: E402

SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]


class Pipeline:
    def __init__(self, base: Path, runs: int) -> None:
        self.work = base / "work"
        self.work.mkdir(parents=True)
        self.out = base / "out dir;$(touch CANARY)'q"
        self.cfg = base / "tiny.yaml"
        self.cfg.write_text(json.dumps({"only": ["resnet"], "allow_fewer_runs": True, "outdir": str(self.out),
                                        "benchmarks": {"resnet": {"runs": runs}}}))
        self.runs = runs

    def cmd(self, *args: str) -> list[str]:
        return [*SNAKEMAKE, "--directory", str(self.work), "--configfile", str(self.cfg), "--cores", "2", *args]

    def run(self, *args: str, preexec: Callable[[], None] | None = None) -> tuple[int, str, float]:
        t = time.monotonic()
        p = subprocess.run(self.cmd(*args), cwd=REPO, capture_output=True, text=True, preexec_fn=preexec,
                           check=False)
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t

    def results(self) -> dict[str, bytes]:
        """Every finished run's files (result.txt and run.json of runs whose run.json exists)."""
        out = {}
        for i in range(self.runs):
            d = self.out / "runs" / SYSTEM / "resnet" / str(i)
            if (d / "run.json").exists():
                for name in ("result.txt", "run.json"):
                    if (d / name).exists():
                        out[f"{i}/{name}"] = (d / name).read_bytes()
        return out

    def half_written(self) -> list[str]:
        """Files that look complete but are not (results failing their hash, a report without its end)."""
        bad = []
        for i in range(self.runs):
            d = self.out / "runs" / SYSTEM / "resnet" / str(i)
            if (d / "result.txt").exists() and (d / "run.json").exists() and \
                    (p := integrity.result_problem(d / "result.txt")):
                bad.append(p)
            if (d / "result.txt").exists() and b'"run_stop"' not in (d / "result.txt").read_bytes():
                bad.append(f"{d / 'result.txt'}: no run_stop")
        report = self.out / "report.html"
        if report.exists() and not report.read_text(errors="replace").rstrip().endswith("</html>"):
            bad.append(f"{report}: truncated")
        return bad


def jobs_run(log: str) -> list[str]:
    """'rule[wildcards]' of every job a Snakemake log shows started."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", log):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m:
            w = re.search(r"wildcards: ([^\n]*)", block)
            jobs.append(m.group(1) + (f"[{w.group(1)}]" if w else ""))
    return jobs


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def pids_matching(pattern: str, root: int) -> list[int]:
    """Processes under ``root`` (this script's Snakemake) whose command line matches ``pattern``;
    never anything else on the machine."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if not re.search(pattern, cmd):
            continue
        pid = ancestor = int(d.name)
        while ancestor > 1 and ancestor != root:
            ancestor = _parent(ancestor)
        if ancestor == root and pid != root:
            out.append(pid)
    return out


def kill_fault(p: Pipeline, name: str, prepare: Callable[[], list[str]], target: str, rng: random.Random) -> dict:
    """Start Snakemake with the step back in the DAG, SIGKILL ``target`` (a cmdline pattern, or
    'snakemake' for Snakemake's process group) at a random moment, then run Snakemake again."""
    extra = prepare()
    before = p.results()  # what is finished when the fault strikes
    proc = subprocess.Popen(p.cmd(*extra), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    pattern = target
    killed = ""
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not killed:
        # Snakemake itself: at a random moment while a run job is running
        pids = pids_matching(r"-m mlrepro\.run_job", proc.pid) and [proc.pid] if target == "snakemake" \
            else pids_matching(pattern, proc.pid)
        if pids:
            # a random moment of its life (a compliance step lives about a second)
            time.sleep(rng.uniform(0.0, {"snakemake": 10.0, r"-m mlrepro\.compliance ": 0.3}.get(target, 2.0)))
            try:
                if target == "snakemake":
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                killed = f"{len(pids)} process(es)"
            except ProcessLookupError:
                killed = ""
        time.sleep(0.1)
    proc.wait()
    half = p.half_written()
    p.run("--unlock")
    code, log, seconds = p.run()
    after = p.results()
    intact = all(after.get(k) == v for k, v in before.items())
    return {"fault": f"SIGKILL {name}", "injected": bool(killed), "half_written_taken": len(half),
            "finished_intact": intact, "rerun_ok": code == 0, "rerun_s": round(seconds, 1),
            "rerun_jobs": ", ".join(j for j in jobs_run(log) if not j.startswith("all")) or "-"}


def hostile_archives(base: Path) -> dict:
    """Issue 23's dataset archives (tests/test_dataset_archives.py) through mlrepro.datasets.extract, each
    into its own folder beside an ``outside`` one: refused, crashed, or files written outside."""
    from mlrepro.datasets import extract
    from tests.test_dataset_archives import HOSTILE_TARS, _tar, path_max_tar, zeros_zip

    cases = {f"tar {i}: {problem}": _tar(*members) for i, (members, problem) in enumerate(HOSTILE_TARS)}
    cases |= {"PATH_MAX tar": path_max_tar(), "PATH_MAX tar, bottom link at its real path": path_max_tar(False),
              "zip of 1 GiB of zeros": zeros_zip()}
    refused, crashes, outside = 0, [], 0
    for n, (name, data) in enumerate(cases.items()):
        folder = base / "archives" / str(n)
        (folder / "outside").mkdir(parents=True)
        (folder / "hostile").write_bytes(data)
        try:
            extract.extract(folder / "hostile", folder / "dest", extract.Budget(16 << 20, "fault matrix"))
        except extract.ArchiveError:
            refused += 1
        except Exception as e:  # any other exception is a crash, counted
            crashes.append(f"{name}: {type(e).__name__}")
        outside += len(os.listdir(folder / "outside")) + len(os.listdir(folder)) - 3
        shutil.rmtree(folder)
    return {"fault": "hostile dataset archives", "cases": len(cases), "refused": refused, "crashes": crashes,
            "files_written_outside": outside}


def round2() -> dict:
    """Issue 23's cases (benchmarks/hostile_round2.py) in a folder of their own; its closing figures."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import hostile_round2

    with tempfile.TemporaryDirectory(prefix="mlrepro-round2-") as tmp:
        rows = hostile_round2.run(Path(tmp))
    return hostile_round2.figures(rows)


def round3() -> dict:
    """Issue 36's cases, a shared login node (benchmarks/hostile_round3.py; root: it makes a second user)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import hostile_round3

    with tempfile.TemporaryDirectory(prefix="mlrepro-round3-") as tmp:
        rows = hostile_round3.run(Path(tmp))
    return hostile_round3.figures(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--archives-only", action="store_true", help="only the hostile dataset archives (seconds)")
    ap.add_argument("--round2", action="store_true",
                    help="only issue 23's hostile cases (benchmarks/hostile_round2.py)")
    ap.add_argument("--round3", action="store_true",
                    help="only issue 36's cases, a shared login node (benchmarks/hostile_round3.py)")
    args = ap.parse_args()
    if args.archives_only:
        with tempfile.TemporaryDirectory() as tmp:
            print(hostile_archives(Path(tmp)))
        return
    if args.round2:
        print(json.dumps(round2(), indent=1))
        return
    if args.round3:
        print(json.dumps(round3(), indent=1))
        return
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="mlrepro-faults-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(base)],
                             capture_output=True, check=False).returncode == 0
    p = Pipeline(base, args.runs)
    rows: list[dict] = []
    try:
        code, log, seconds = p.run()
        assert code == 0, log[-3000:]
        print(f"baseline pipeline: {seconds:.0f} s; canary created: {(p.work / 'CANARY').exists()}", flush=True)
        last = str(args.runs - 1)
        run_dir = p.out / "runs" / SYSTEM / "resnet" / last

        def drop_last_run() -> list[str]:
            shutil.rmtree(run_dir)
            return []

        faults = [
            ("a run (training process)", drop_last_run, r"-m mlrepro\.train .*--seed"),
            ("the telemetry sampler", drop_last_run, r"mlrepro\.telemetry"),
            ("a compliance step", lambda: ["--forcerun", "compliance"], r"-m mlrepro\.compliance "),
            ("the package step", lambda: ["--forcerun", "package"], r"-m mlrepro\.package "),
            ("the report step", lambda: ["--forcerun", "report"], r"-m mlrepro\.report\.submission "),
            ("Snakemake itself", drop_last_run, "snakemake"),
        ]
        for name, prepare, target in faults:
            rows.append(kill_fault(p, name, prepare, target, rng))
            print(rows[-1], flush=True)

        # disk full while a result is written
        shutil.rmtree(run_dir)
        before = p.results()
        if mounted:
            filler = base / "filler"
            free = shutil.disk_usage(base).free
            with filler.open("wb") as f:
                f.truncate(0)
                f.write(b"\0" * max(0, free - 24 * 1024))  # tmpfs: leave about 24 KB
            code, log, _ = p.run()
            filler.unlink()
            how = "tmpfs full"
        else:
            def limit() -> None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))
            code, log, _ = p.run(preexec=limit)
            how = "RLIMIT_FSIZE 16 KB"
        clear = "No space left on device" in log or "File too large" in log
        half = p.half_written()
        p.run("--unlock")
        code2, log2, seconds = p.run()
        rows.append({"fault": f"disk full ({how})", "injected": True, "half_written_taken": len(half),
                     "finished_intact": all(p.results().get(k) == v for k, v in before.items()),
                     "clear_error": clear and code != 0, "rerun_ok": code2 == 0, "rerun_s": round(seconds, 1),
                     "rerun_jobs": ", ".join(j for j in jobs_run(log2) if not j.startswith("all"))})
        print(rows[-1], flush=True)

        # read-only output folder
        before = p.results()
        ro = subprocess.run(["mount", "--bind", str(p.out), str(p.out)], capture_output=True,
                            check=False).returncode == 0
        ro = ro and subprocess.run(["mount", "-o", "remount,bind,ro", str(p.out)], capture_output=True,
                                   check=False).returncode == 0
        if ro:
            code, log, _ = p.run("--forcerun", "report")
            subprocess.run(["umount", str(p.out)], check=False)
            rows.append({"fault": "read-only output folder", "injected": True, "clear_error": code != 0 and
                         "must be writable" in log, "finished_intact": p.results() == before,
                         "traceback": "Traceback" in log})
        else:
            rows.append({"fault": "read-only output folder", "injected": False, "note": "bind mounts not allowed"})
        print(rows[-1], flush=True)

        # a second invocation on the same output folder, from another working directory
        before = p.results()
        holder = subprocess.Popen(p.cmd("--forcerun", "report"), cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        while not (p.out / ".mlrepro.lock").exists() or str(holder.pid) not in (p.out / ".mlrepro.lock").read_text():
            time.sleep(0.1)
        other = base / "other"
        other.mkdir(exist_ok=True)
        second = subprocess.run([*SNAKEMAKE, "--directory", str(other), "--configfile", str(p.cfg), "--cores", "2"],
                                cwd=REPO, capture_output=True, text=True, check=False)
        holder.wait()
        rows.append({"fault": "second invocation, same outdir", "injected": True,
                     "refused": second.returncode != 0 and f"pid {holder.pid}" in second.stderr + second.stdout,
                     "finished_intact": p.results() == before})
        print(rows[-1], flush=True)

        # tampering
        result = p.out / "runs" / SYSTEM / "resnet" / "0" / "result.txt"
        org = p.out / "submission" / "mlrepro"
        detected: list[str] = []
        cases: list[str] = []
        original = result.read_bytes()
        for what, edit in [("edit run_stop in a result", lambda: result.write_bytes(
                original.replace(b'"key": "run_stop"', b'"key": "run_stop" ', 1))),
                           ("delete run.json's hash", None)]:
            cases.append(what)
            if edit is None:
                rj = result.with_name("run.json")
                saved = rj.read_bytes()
                doc = json.loads(saved)
                doc.pop("result_sha256")
                rj.write_text(json.dumps(doc))
                code, log, _ = p.run()
                rj.write_bytes(saved)
                if code != 0 and "records no result_sha256" in log:
                    detected.append(what)
            else:
                edit()
                code, log, _ = p.run()
                result.write_bytes(original)
                if code != 0 and str(result) in log:
                    detected.append(what)
        for what, edit in [("edit a packaged result", lambda f: f.write_bytes(f.read_bytes() + b"\n")),
                           ("delete a packaged result", lambda f: f.unlink()),
                           ("delete systems/", lambda f: shutil.rmtree(org / "systems"))]:
            cases.append(what)
            victim = next(org.glob("results/*/resnet/result_1.txt"))
            edit(victim)
            code, log, _ = p.run()  # refused, naming the change; `snakemake repair` removes what derives from it
            if code != 0 and "snakemake repair" in log and (str(victim) in log or "systems" in log) \
                    and p.run("repair")[0] == 0 and p.run()[0] == 0 and victim.exists() and (org / "systems").is_dir():
                detected.append(what)
        rows.append({"fault": "tampering", "cases": len(cases), "detected": len(detected),
                     "missed": [c for c in cases if c not in detected]})
        print(rows[-1], flush=True)

        # issue 23: read-only commands on a folder whose package was edited remove nothing (`snakemake repair` does)
        victim = next(org.glob("results/*/resnet/result_1.txt"))
        original = victim.read_bytes()
        victim.write_bytes(original + b"\n")
        derived = {f: f.read_bytes() for f in (p.out / "report.html", p.out / "package_check.json")}
        acted = [mode for mode in ("--list-rules", "--summary", "--dag", "-n")
                 if (p.run(mode)[0] != 0) != (mode != "--list-rules")  # those that build the DAG refuse
                 or any(not f.exists() or f.read_bytes() != b for f, b in derived.items())]
        victim.write_bytes(original)
        rows.append({"fault": "read-only commands on an edited package", "modes": 4, "acted": acted})
        print(rows[-1], flush=True)

        # hostile logs through the gate and the audit (with every entry type) and its report
        root = base / "round"
        kinds = _hostile_logs(root / "Mallory" / "results" / "sys" / "resnet", base / "outside.txt")
        (root / "Mallory" / "systems").mkdir(parents=True)
        (root / "Mallory" / "systems" / "sys.json").write_text("{}")
        crashes = 0
        for name in sorted(kinds)[:5]:
            g = subprocess.run([sys.executable, "-m", "mlrepro.gate.compliance",
                                str(root / "Mallory" / "results" / "sys" / "resnet" / name),
                                "--ruleset", "2.0.0", "--out", str(base / "v.json")],
                               capture_output=True, text=True, timeout=600, check=False)
            crashes += "Traceback" in g.stderr
        (base / "audit.yaml").write_text(json.dumps({"audit": str(root), "audit_out": str(base / "audit"),
                                                     "ruleset": "2.0.0"}))
        a = subprocess.run([*SNAKEMAKE, "--directory", str(base), "--configfile", str(base / "audit.yaml"),
                            "--cores", "2"], cwd=REPO, capture_output=True, text=True, check=False)
        crashes += a.returncode != 0
        ran = 0
        for page in (base / "audit" / "report").rglob("*.html"):
            try:
                assert_no_injection(page)
            except AssertionError:
                ran += 1
        try:
            assert_no_injection(p.out / "report.html")
        except AssertionError:
            ran += 1
        rows.append({"fault": "hostile inputs", "files": len(kinds), "gate_and_audit_crashes": crashes,
                     "injected_scripts_ran": ran, "canary": (p.work / "CANARY").exists()})
        print(rows[-1], flush=True)
        rows.append(hostile_archives(base))
        print(rows[-1], flush=True)
        rows.append({"fault": "issue 23's hostile cases", **round2()})
        print(rows[-1], flush=True)
        rows.append({"fault": "issue 36's cases (a shared login node)", **round3()})
        print(rows[-1], flush=True)
    finally:
        print("\nFAULT MATRIX")
        for r in rows:
            print("  " + " | ".join(f"{k}={v}" for k, v in r.items()))
        if mounted:
            subprocess.run(["umount", "-l", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
