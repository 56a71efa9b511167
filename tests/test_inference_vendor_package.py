"""The vendor flow's package (mlrepro/inference/vendor/package.py: vendor_package, vendor_check): the staging with
the folder's code/ and systems/ in the declared round's layout, wherever the round's staging targets left it, and
the checker the declared round's checkout ships. The official v6.1 checker's verdict on a real staging is
tests/test_inference_vendor_standin.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlrepro.inference.vendor import package
from mlrepro.inference.vendor.preview import package_plan
from tests.conftest import make_job

ORG, SYS, RUN = "Org", "Sys_TRT", "Sys_TRT/resnet50/Offline"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _folder(tmp: Path) -> Path:
    """A working copy at work/closed/<ORG> with code/, a system description of its system and another's."""
    work = tmp / "work" / "closed" / ORG
    _write(work, {"code/resnet50/README.md": "how to run\n", "systems/Sys_TRT.json": '{"system_type": "edge"}',
                  "systems/Other_TRT.json": "{}"})
    return work


def _staged(org: Path) -> None:
    """What v4.1-era staging writes: results, measurements and compliance side by side (the v5.1 layout)."""
    _write(org, {f"results/{RUN}/performance/run_1/mlperf_log_detail.txt": "detail\n",
                 f"measurements/{RUN}/{SYS}_Offline.json": "{}", f"measurements/{RUN}/user.conf": "conf\n",
                 f"measurements/{RUN}/README.md": "readme\n",
                 f"compliance/{RUN}/TEST01/verify_performance.txt": "TEST PASS\n"})


def test_a_v4_1_style_staging_becomes_the_v6_1_layout_with_code_and_the_systems_that_have_results(
        tmp_path: Path) -> None:
    work = _folder(tmp_path)
    staged = work / "build" / "submission-staging" / "closed" / ORG
    _staged(staged)
    (tmp_path / "secret").write_text("outside\n")
    (staged / "results" / RUN / "link").symlink_to(tmp_path / "secret")
    before = sorted(str(p.relative_to(staged)) for p in staged.rglob("*"))
    out = tmp_path / "pkg"
    changes = package.assemble(work, ORG, "v6.1", out)
    org = out / "closed" / ORG
    assert (org / "results" / RUN / "measurements.json").is_file()
    assert (org / "results" / RUN / "TEST01" / "verify_performance.txt").read_text() == "TEST PASS\n"
    assert (org / "src" / "resnet50" / "README.md").is_file() and not (org / "code").exists()
    assert sorted(p.name for p in (org / "systems").iterdir()) == ["Sys_TRT.json"]
    assert not (org / "measurements").exists() and not (org / "compliance").exists()
    assert not (org / "results" / RUN / "link").exists()  # a link in the run folder is not followed or copied
    assert len(changes) == 5 and (out / "relayout.txt").read_text().splitlines() == changes
    assert sorted(str(p.relative_to(staged)) for p in staged.rglob("*")) == before  # the staging is not written
    assert not list(tmp_path.glob(".pkg.*"))  # no temporary folder left


def test_a_v2_0_style_staging_in_the_folder_is_kept_as_staged_for_v2_0(tmp_path: Path) -> None:
    work = _folder(tmp_path)
    _staged(work)  # v2.0's update_results/update_compliance write into the folder itself
    out = tmp_path / "pkg"
    assert package.assemble(work, ORG, "v2.0", out) == []
    org = out / "closed" / ORG
    for sub in (f"results/{RUN}/performance/run_1/mlperf_log_detail.txt", f"measurements/{RUN}/user.conf",
                f"compliance/{RUN}/TEST01/verify_performance.txt", "code/resnet50/README.md", "systems/Sys_TRT.json"):
        assert (org / sub).is_file(), sub


def test_no_staging_is_named_with_the_step_that_makes_it(tmp_path: Path) -> None:
    with pytest.raises(package.PackageError, match=r"no staged results .* did vendor_stage run"):
        package.assemble(_folder(tmp_path), ORG, "v6.1", tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


@pytest.mark.parametrize(("shipped", "argv_head"), [
    ("submission_checker/main.py", ["-m", "submission_checker.main"]),  # v5.x on
    ("submission_checker.py", ["{tools}/submission_checker.py"]),
    ("submission-checker.py", ["{tools}/submission-checker.py"]),  # v2.0
])
def test_the_checker_is_run_in_the_form_its_checkout_ships(tmp_path: Path, shipped: str, argv_head: list[str]) -> None:
    tools = tmp_path / "inference" / "tools" / "submission"
    _write(tools, {shipped: ""})
    argv, cwd = package.checker_argv(tmp_path / "inference", tmp_path / "pkg", "v6.1", ORG, tmp_path / "s.csv")
    assert cwd == tools and argv[1:1 + len(argv_head)] == [a.format(tools=tools) for a in argv_head]
    assert argv[-8:] == ["--input", str(tmp_path / "pkg"), "--version", "v6.1", "--submitter", ORG, "--csv",
                         str(tmp_path / "s.csv")]


def test_a_checkout_without_a_checker_and_no_checkout_are_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(package.PackageError, match=r"inference\.mlcommons_inference .*: no official checker"):
        package.checker_argv(tmp_path, tmp_path / "pkg", "v6.1", ORG, tmp_path / "s.csv")
    job = make_job("vendor_check", input={"pkg": tmp_path}, output={"out": tmp_path / "check.json"},
                   params={"checkout": "", "round": "v6.1", "submitter": ORG})
    with pytest.raises(package.PackageError, match=r"inference\.mlcommons_inference is not set"):
        package.check_job(job)


def test_the_preview_says_the_package_layout_and_which_checker_judges_it() -> None:
    plan = package_plan("v6.1", "/data/inference")
    assert "code -> src" in plan["layout"] and plan["checker"] == "/data/inference"
    assert plan["check"].startswith("the official v6.1 checker of /data/inference")
    plan = package_plan("v2.0", "")
    assert plan["layout"].startswith("as staged") and plan["checker"] is None
    assert "set inference.mlcommons_inference" in plan["check"] and "check_submission clones" in plan["check"]
    json.dumps(plan)


def _record(path: Path, result: dict[str, object], telemetry: dict[str, object] | None, seconds: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"rule": "vendor_run", "steps": [{"target": "run_harness", "seconds": seconds}], "result": result}
    if telemetry is not None:
        rec["telemetry"] = telemetry
    path.write_text(json.dumps(rec))
    return path


def test_the_vendor_report_and_the_pipeline_report_put_energy_beside_throughput_per_accelerator_escaped(
        tmp_path: Path) -> None:
    from mlrepro.inference.vendor.jobs import report_job

    hostile = "<script>alert(1)</script>"
    metric = f"Samples per second {hostile}" + "y" * 5_000  # a log's string, escaped and shortened in the table
    jobs = tmp_path / "jobs" / "run"
    sampled = _record(jobs / "resnet50" / "Offline" / "performance.json",
                      {"scenario": "Offline", "metric": metric, "value": 80000.0,
                       "unit": "samples/s", "valid": True, "accelerators": 8, "per_accelerator": 10000.0,
                       "accelerator_energy_j": 1234.5, "summary": "x" * 50_000 + hostile},
                      {"nvml": "ok", "gpus": [{}] * 8, "accelerator_energy_j": 1234.5}, seconds=2.0)
    unsampled = _record(jobs / "bert" / "Server" / "performance.json",
                        {"scenario": "Server", "metric": "Completed samples per second", "value": 500.0,
                         "unit": "samples/s", "valid": False, "accelerators": 8, "per_accelerator": 62.5,
                         "summary": "s.txt"}, None, seconds=1.0)
    job = make_job("vendor_report", input={"runs": [sampled, unsampled]},
                   output={"table": tmp_path / "report.csv", "html": tmp_path / "report.html",
                           "rows": tmp_path / "report.json"})
    report_job(job)
    csv = (tmp_path / "report.csv").read_text().splitlines()
    assert csv[1] == f"resnet50,Offline,{metric},80000.0,samples/s,True,8,10000.0,1234.5"
    assert csv[2] == "bert,Server,Completed samples per second,500.0,samples/s,False,8,62.5,"
    page = (tmp_path / "report.html").read_text()
    _assert_vendor_table(page, hostile)
    assert "[... shortened: 50025 characters in all]" in page and "x" * 50_000 not in page  # where each comes from
    # the pipeline's report: the same table from the rows vendor_report wrote (rules/report.smk's input vendor)
    from mlrepro.report.render import render
    from mlrepro.report.submission import vendor_rows

    rows = vendor_rows([tmp_path / "report.json"])
    assert rows is not None and vendor_rows([]) is None
    render("submission.html.j2", tmp_path / "main.html", **_main_report(), vendor_rows=rows)
    html = (tmp_path / "main.html").read_text()
    assert 'id="inference-vendor"' in html and 'href="inference_vendor/report.html"' in html
    _assert_vendor_table(html.split('id="inference-vendor"')[1].split('id="package"')[0], hostile)
    render("submission.html.j2", tmp_path / "training.html", **_main_report(), vendor_rows=None)
    assert "inference-vendor" not in (tmp_path / "training.html").read_text()


def _assert_vendor_table(html: str, hostile: str) -> None:
    """The vendor runs' table of _record's two runs: per accelerator beside energy and power, log strings escaped
    and shortened."""
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "[... shortened: 5044 characters in all]" in html and "y" * 5_000 not in html
    row = next(r for r in html.split("<tr>") if "resnet50" in r)
    for cell in ("10,000.00", "1,234.5", "617.2", "ok (8 GPUs)", "VALID"):  # per accelerator, J, W: one row
        assert cell in row, (cell, row)
    row = next(r for r in html.split("<tr>") if "<td>bert</td>" in r)
    assert "62.50" in row and "not sampled" in row and "INVALID" in row


def _main_report() -> dict[str, object]:
    """The pipeline report's context (mlrepro/report/submission.py build_context) for a config with no training
    result: what its template reads."""
    host = {"hostname": "h", "cpu_model": "cpu", "logical_cpus": 2, "memory_bytes": 2**30,
            "gpus": {"nvml": False, "reason": "no NVML"}}
    return {"org": ORG, "system": SYS, "usage": "training", "ruleset": "5.0.0", "division": "closed",
            "engine": "native", "config_hash": "0", "commit": "0", "submittable": True, "systems": {},
            "seed_table": [], "summary": [], "cpu_only": True, "sections": [], "gate_judges": [],
            "package": {"valid": True, "judged_by": "x", "usage": "training", "ruleset": "5.0.0", "folder": "p",
                        "errors": [], "warnings": [], "manifest_sha256": None},
            "environment": {"engine": {"engine": "native", "image": None, "python": "3", "packages": {},
                                       "pip_freeze": []}, "host": host},
            "config": {}, "timings": []}


def test_the_package_job_writes_the_rules_output_folder(tmp_path: Path) -> None:
    work = _folder(tmp_path)
    _staged(work / "build" / "submission-staging" / "closed" / ORG)
    out = tmp_path / "inference_vendor" / "package"
    package.package_job(make_job("vendor_package", output={"out": out},
                                 params={"workdir": str(work), "submitter": ORG, "round": "v6.1"}))
    assert (out / "closed" / ORG / "results" / RUN / "measurements.json").is_file()
    assert (out / "relayout.txt").is_file() and sorted(p.name for p in out.parent.iterdir()) == ["package"]
