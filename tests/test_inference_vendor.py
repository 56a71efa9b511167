"""The vendor flow's plan against NVIDIA's own code (../shared/data, never copied into the project): the preview's
steps, expanded with ``make -n`` on a copy of the folder with the stand-ins on PATH, equal ``standin/trace.sh``'s
traces, and its user.conf equals what NVIDIA's code writes for the config ``standin/resolve_config.py`` resolves."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from mlrepro.inference.vendor import flow, nvconfig
from mlrepro.inference.vendor.preview import entries
from mlrepro.inference.vendor.steps import Planner, Spec
from tests.rounds import DATA, extract

NVIDIA_CODE = DATA / "mlperf_inference_nvidia_code_v4.1.tar.xz"
SYSTEM = "H100_SXM_80GBx8"
DIRECTORY_NOTE = re.compile(r"make\[\d+\]: (Entering|Leaving) directory ")
CASES = [("resnet50", "Offline"), ("bert", "Server"), ("llama2-70b", "Offline")]


@pytest.fixture(scope="module")
def nvidia(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked v4.1 folder (mlperf_inference_nvidia_code_v4.1/: closed/NVIDIA, standin/, traces/)."""
    if not NVIDIA_CODE.is_file():
        pytest.skip(f"{NVIDIA_CODE} is absent (NVIDIA's code is read from ../shared/data)")
    root = extract(NVIDIA_CODE, tmp_path_factory.mktemp("nvidia"))
    return root / "mlperf_inference_nvidia_code_v4.1"


def _env(scratch: Path, tools: Path) -> dict[str, str]:
    """trace.sh's environment before it puts the stand-ins first on PATH: ``tools`` (NvidiaOracle's make and python3)
    first, an external user, no driver check; not the name of the test that asks (pytest's, which would make each test's
    invocations of make distinct)."""
    inherited = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return {**inherited, "PATH": f"{tools / 'bin'}:{tools / 'python' / 'bin'}:{os.environ['PATH']}",
            "EXTERNAL_USER": "1", "SKIP_DRIVER_CHECK": "1", "SUBMITTER": "NVIDIA", "MLPERF_SCRATCH_PATH": str(scratch)}


# make, as NvidiaOracle puts it on PATH: the real make, run once per distinct invocation (folder, arguments and
# environment; not the variables a shell keeps for itself), its output, errors and status recorded and given again to
# the same invocation, be it from trace.sh, from a make that make -n runs for a $(MAKE) line, or from the test
MEMO_MAKE = """\
#!{python} -IS
import hashlib, os, subprocess, sys
from pathlib import Path

SHELL_OWN = ("_", "SHLVL", "OLDPWD")
env = sorted((k, v) for k, v in os.environ.items() if k not in SHELL_OWN)
entry = Path({memo!r}) / hashlib.sha256(repr((os.getcwd(), sys.argv[1:], env)).encode()).hexdigest()
if not entry.is_dir():
    done = subprocess.run(["make", *sys.argv[1:]], executable={make!r}, capture_output=True)  # $(MAKE) stays make
    fresh = entry.with_name(f"{{entry.name}}.{{os.getpid()}}")
    fresh.mkdir()
    for name, data in (("out", done.stdout), ("err", done.stderr), ("rc", str(done.returncode).encode())):
        (fresh / name).write_bytes(data)
    fresh.rename(entry)
sys.stdout.buffer.write((entry / "out").read_bytes())
sys.stderr.buffer.write((entry / "err").read_bytes())
sys.exit(int((entry / "rc").read_text()))
"""


# python3 SCRIPT ARGS..., but inspect finds a class's source parsing each file once, not once a class (Python 3.11's
# inspect.findsource parses the whole file for every class it is asked about; NVIDIA's ConfigRegistry asks for every
# class of a config's chain while it registers them: three quarters of resolve_config.py's CPU time); the parse of the
# same text is the same tree, and inspect only reads it
AS_SCRIPT = """\
import ast, functools, inspect, os, runpy, sys, types
inspect.ast = types.SimpleNamespace(**{**vars(ast), "parse": functools.lru_cache(maxsize=None)(ast.parse)})
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""

def test_round_detected_from_the_makefiles(nvidia: Path) -> None:
    f = flow.Flow.read(nvidia / "closed" / "NVIDIA")
    assert len(f.makefiles.files) == 8 and f.harness == "-m code.main"
    assert [a.mode for a in f.audits] == ["TEST01", "TEST04", "TEST05", "TEST06"]
    assert [t for _, t in f.post] == ["stage_results", "stage_compliance", "truncate_results", "export_submission",
                                      "pack_submission"]
    assert f.where("prebuild") == f.where("export_submission") == f.where("pack_submission") == "host"
    assert f.where("run_harness") == f.where("stage_results") == f.where("run_audit_test01") == "container"


def test_round_of_another_layout(tmp_path: Path) -> None:
    """A v2.0-style folder (one Makefile, code/main.py, update_results, one target running TEST04-A and TEST04-B)
    is read by the same rules, not refused for not being v4.1."""
    (tmp_path / "Makefile").write_text(
        "RUN_ARGS ?=\n.PHONY: run_harness\nrun_harness: link_dirs\n"
        "\t@$(PYTHON3_CMD) code/main.py $(RUN_ARGS) --action=\"run_harness\"\n"
        "run_audit_test01: link_dirs\n\t@$(PYTHON3_CMD) code/main.py $(RUN_ARGS) --audit_test=TEST01 "
        "--action=\"run_audit_harness\"\n"
        "run_audit_test04: link_dirs\n\t@$(PYTHON3_CMD) code/main.py $(RUN_ARGS) --audit_test=TEST04-A "
        "--action=\"run_audit_harness\"\n\t@$(PYTHON3_CMD) code/main.py $(RUN_ARGS) --audit_test=TEST04-B "
        "--action=\"run_audit_harness\"\n"
        "update_results:\n\t@$(PYTHON3_CMD) scripts/update_results.py $(RUN_ARGS)\n"
        "update_compliance:\n\t@$(PYTHON3_CMD) scripts/update_compliance.py\n"
        "truncate_results:\n\t@python3 build/inference/tools/submission/truncate_accuracy_log.py --input .\n")
    f = flow.Flow.read(tmp_path)
    assert f.harness == "code/main.py" and len(f.makefiles.files) == 1
    assert [(a.mode, a.tests) for a in f.audits] == [("TEST01", ("TEST01",)), ("TEST04", ("TEST04-A", "TEST04-B"))]
    assert f.post == (("stage", "update_results"), ("stage_compliance", "update_compliance"),
                      ("truncate", "truncate_results"))


def test_not_a_vendor_folder(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("all:\n\techo hi\n")
    with pytest.raises(ValueError, match="no run_harness target"):
        flow.Flow.read(tmp_path)


class NvidiaOracle:
    """What NVIDIA's code says, on one copy of its folder shared by the cases of this module: trace.sh's traces, the
    ``make -n`` of a step and the config resolve_config.py resolves each depend only on their arguments (the folder
    and the scratch path being the same, and none of them writing into the folder), so each distinct one is computed
    once, however many cases ask for it (seven of each case's steps are the same in all three): a make that trace.sh
    runs for one case and again for another (its eight targets that take no RUN_ARGS), or that the test asks for with
    the same arguments as trace.sh did, runs once (MEMO_MAKE)."""

    def __init__(self, nvidia: Path, root: Path) -> None:
        self.nvidia, self.root = nvidia, root
        self.folder = root / "copy" / "closed" / "NVIDIA"
        shutil.copytree(nvidia / "closed" / "NVIDIA", self.folder, symlinks=True)
        self.scratch = root / "scratch"
        self.scratch.mkdir()
        # the tools before the rest of PATH: a python3 with no site packages (NVIDIA's Makefiles start one about six
        # times per make, only to print its version; a version manager's shim costs about 40 processes a call, a
        # site-packages .pth that imports a package most of the call's time) and MEMO_MAKE
        self.tools = root / "tools"
        venv.EnvBuilder(symlinks=True).create(self.tools / "python")
        memo = root / "made"
        memo.mkdir()
        make = shutil.which("make")
        assert make, "GNU make is not on PATH"
        (self.tools / "bin").mkdir()
        (self.tools / "bin" / "make").write_text(MEMO_MAKE.format(python=self.tools / "python" / "bin" / "python3",
                                                                  memo=str(memo), make=make))
        (self.tools / "bin" / "make").chmod(0o755)
        self._traces: dict[str, dict[str, list[str]]] = {}
        self._expanded: dict[tuple[str, ...], list[str]] = {}
        self._fields: dict[tuple[str, str], dict[str, object]] = {}

    def env(self) -> dict[str, str]:
        """The environment trace.sh's makes see: the stand-ins first on PATH, as trace.sh puts them (the same
        environment, so that MEMO_MAKE gives a make that trace.sh ran to the same one here), in the folder."""
        env = _env(self.scratch, self.tools)
        return {**env, "PATH": f"{self.nvidia / 'standin' / 'bin'}:{env['PATH']}", "PWD": str(self.folder)}

    def trace(self, run_args: str) -> dict[str, list[str]]:
        """standin/trace.sh's ``make -n`` of its 21 targets with these RUN_ARGS: target -> lines."""
        if run_args not in self._traces:
            out = self.root / f"trace_{len(self._traces)}"
            subprocess.run(["bash", str(self.nvidia / "standin" / "trace.sh"), str(self.folder), str(out), run_args],
                           env=_env(self.scratch, self.tools), check=True, capture_output=True, timeout=600)
            self._traces[run_args] = {p.stem: p.read_text().splitlines() for p in out.glob("*.txt") if p.stem != "rc"}
        return self._traces[run_args]

    def make_n(self, argv: list[str]) -> list[str]:
        key = tuple(argv)
        if key not in self._expanded:
            assert argv[0] == "make"
            done = subprocess.run(["make", "-n", *argv[1:], "TIMESTAMP=T"], cwd=self.folder, env=self.env(),
                                  capture_output=True, text=True, timeout=120)
            self._expanded[key] = done.stdout.splitlines()
        return self._expanded[key]

    def user_conf(self, benchmark: str, scenario: str, flags: dict[str, object], out: Path) -> str:
        """What NVIDIA's code writes: resolve_config.py (in its own process) names the config and its fields;
        code/common/submission.py's generate_user_conf (in another) writes them, with the LoadGen flags the harness
        passes (build_default_flags: LOADGEN_ARGS and the scenario's keys) and a stand-in sample count."""
        env = {**self.env(), "OUTSIDE_MLPINF_ENV": "1"}
        if (benchmark, scenario) not in self._fields:
            done = subprocess.run([sys.executable, "-c", AS_SCRIPT, str(self.nvidia / "standin" / "resolve_config.py"),
                                   benchmark,
                                   scenario, SYSTEM], cwd=self.folder, env=env, capture_output=True, text=True,
                                  timeout=300, check=True)
            fields = {}
            for line in done.stdout.splitlines()[1:]:
                key, _, value = line.strip().partition(" = ")
                try:
                    fields[key] = ast.literal_eval(value)
                except (ValueError, SyntaxError):
                    continue  # benchmark, scenario: enum members
            self._fields[benchmark, scenario] = fields
        script = (
            "import json, sys\nsys.path.insert(0, '.')\n"
            "from code.common.submission import generate_user_conf\n"
            "from code.common.constants import Scenario\n"
            "from code.common.arguments import LOADGEN_ARGS, getScenarioMetricArgs\n"
            "fields, scenario, flags = json.loads(sys.argv[1]), Scenario.get_match(sys.argv[2]), "
            "json.loads(sys.argv[3])\n"
            "keys = set(LOADGEN_ARGS) | set(getScenarioMetricArgs(scenario))\n"
            "flag_dict = {k: v for k, v in {**fields, **flags}.items() if k in keys}\n"
            "flag_dict['performance_sample_count_override'] = 'PENDING'\n"
            "generate_user_conf(sys.argv[4], scenario, flag_dict)\n")
        subprocess.run([sys.executable, "-c", script, json.dumps(self._fields[benchmark, scenario]), scenario,
                        json.dumps(flags), str(out)], cwd=self.folder, env=env, capture_output=True, text=True,
                       timeout=300, check=True)
        return out.read_text()


@pytest.fixture(scope="module")
def oracle(nvidia: Path, tmp_path_factory: pytest.TempPathFactory) -> NvidiaOracle:
    return NvidiaOracle(nvidia, tmp_path_factory.mktemp("nvidia_oracle"))


@pytest.mark.integration  # trace.sh runs make -n of 21 targets per case (NvidiaOracle: each distinct one once)
@pytest.mark.parametrize(("benchmark", "scenario"), CASES)
def test_preview_equals_nvidia_traces(oracle: NvidiaOracle, tmp_path: Path, benchmark: str, scenario: str) -> None:
    nvidia, folder, scratch = oracle.nvidia, oracle.folder, oracle.scratch
    preview = entries(Spec(code=folder, system_id=SYSTEM, benchmarks=(benchmark,), scenarios=(scenario,),
                           submitter="NVIDIA"))
    assert preview["round"]["version"] == "v4.1"
    by_mode = {e["mode"]: e for e in preview["entries"]}
    assert set(by_mode) >= {"performance", "accuracy", "TEST01" if benchmark != "llama2-70b" else "TEST06"}
    ra = f"--benchmarks={benchmark} --scenarios={scenario}"
    traces = {"performance": oracle.trace(ra)}
    if benchmark == "resnet50":  # NVIDIA's own stored traces: trace.sh ran as it did for them
        stored = nvidia / "traces" / "resnet50_Offline"
        for target in ("run_harness", "run_audit_test01", "stage_results", "generate_engines"):
            # make's own "Entering directory" notes (GNU make 4.3 here) are not commands
            norm = [line.replace(str(folder), "$(PROJECT_ROOT)").replace(str(scratch), "$(MLPERF_SCRATCH_PATH)")
                    for line in traces["performance"][target] if not DIRECTORY_NOTE.match(line)]
            assert norm == (stored / f"{target}.txt").read_text().splitlines(), target
        traces["accuracy"] = oracle.trace(ra + " --test_mode=AccuracyOnly")
    expanded: set[tuple[str, ...]] = set()  # the distinct steps of this case
    for mode, entry in by_mode.items():
        if mode == "accuracy" and "accuracy" not in traces:
            continue
        for step in entry["steps"]:
            key = tuple(step["argv"])
            expanded.add(key)
            ours = oracle.make_n(step["argv"])
            # the unit's own run as trace.sh traced its RUN_ARGS; the shared steps as the performance run's
            trace = traces[mode] if step["job"].startswith("run/") and mode in traces else traces["performance"]
            expected = trace[step["target"]]
            if step["target"] == "run_harness":  # our LOG_DIR for trace.sh's build/logs/$(TIMESTAMP)
                ours = [line.replace(entry["log_dir"], f"{folder}/build/logs/T") for line in ours]
            if step["target"] in ("download_model", "download_data", "preprocess_data"):
                expected = [line.replace("resnet50", benchmark) for line in expected]  # trace.sh: BENCHMARKS=resnet50
            if step["target"] == "prebuild":  # ours builds the image and leaves out the interactive container
                cut = next(i for i, line in enumerate(expected) if "attach_docker" in line)
                assert step["argv"][-1] == "DOCKER_DETACH=1" and expected[cut] == "make -f Makefile.docker " \
                                                                                    "attach_docker || true"
                expected = expected[:cut]
            assert ours == expected, (mode, step)
        flags = {}
        if mode.startswith("TEST"):  # what the audit's recipe adds to the harness's command line, as traced
            harness = next(line for line in traces["performance"][flow_target(entry)] if "code.main" in line)
            flags = {k: float(v) for k, v in re.findall(r"--(server_target_qps_adj_factor)=(\S+)", harness)}
        if mode == "accuracy":
            flags["test_mode"] = "AccuracyOnly"
        nvidias = oracle.user_conf(benchmark, scenario, flags, tmp_path / f"{mode}.user.conf")
        pending = f"*.{scenario}.performance_sample_count_override = PENDING\n"
        assert pending in nvidias
        assert entry["user_conf"] == nvidias.replace(pending, ""), mode
        assert set(entry["user_conf_pending"]) == {"performance_sample_count_override"}
    assert len(expanded) >= 10


def flow_target(entry: dict[str, object]) -> str:
    return next(s["target"] for s in entry["steps"] if str(s["job"]).startswith("run/"))  # type: ignore[union-attr]


def test_system_by_id_and_unknown(nvidia: Path) -> None:
    folder = nvidia / "closed" / "NVIDIA"
    planner = Planner(Spec(code=folder, system_id="DGX-H100_H100-SXM-80GBx8", benchmarks=("bert",),
                           scenarios=("Server",), submitter="org"))
    assert (planner.system, planner.system_id) == (SYSTEM, "DGX-H100_H100-SXM-80GBx8")
    assert planner.audit_modes("bert") == ["TEST01", "TEST05"]  # the code exempts bert from TEST04 and TEST06
    with pytest.raises(ValueError, match="system_id: 'H999x8' is neither"):
        Planner(Spec(code=folder, system_id="H999x8", benchmarks=(), scenarios=(), submitter="org"))
    with pytest.raises(ValueError, match=r"no config registered for KnownSystem\.T4x1"):
        nvconfig.Folder(folder).resolve("llama2-70b", "Offline", "T4x1")


# --- the flow's jobs, run by Snakemake on a folder of NVIDIA's layout whose recipes only record what they are asked
TOY_MAKEFILE = """\
SHELL := /bin/bash
PYTHON3_CMD ?= python3
RUN_ARGS ?=
BENCHMARKS ?= toy
export LOG_DIR ?= build/logs/default
.PHONY: prebuild build
prebuild:
\tdocker build -t toy .
build:
\tmkdir -p build && echo build >> build/order.txt
download_model:
\techo "download_model $(BENCHMARKS)" >> build/order.txt
download_data:
\techo "download_data $(BENCHMARKS)" >> build/order.txt
preprocess_data:
\techo "preprocess_data $(BENCHMARKS) $$MLPERF_SCRATCH_PATH" >> build/order.txt
generate_engines:
\t@$(PYTHON3_CMD) -m code.main $(RUN_ARGS) --action="generate_engines"
run_harness:
\t@mkdir -p $(LOG_DIR)
\t@set -o pipefail && $(PYTHON3_CMD) -m code.main $(RUN_ARGS) --action="run_harness" 2>&1 | tee $(LOG_DIR)/stdout.txt
run_audit_test01_once:
\t@$(PYTHON3_CMD) -m code.main $(RUN_ARGS) --audit_test=TEST01 --action="run_audit_harness"
run_audit_test01:
\t@for i in 1 2; do $(MAKE) run_audit_test01_once && break; done
run_audit_test04:
\t@$(PYTHON3_CMD) -m code.main $(RUN_ARGS) --audit_test=TEST04 --action="run_audit_harness"
stage_results:
\techo "stage_results $(SUBMITTER)" >> build/order.txt
stage_compliance:
\techo stage_compliance >> build/order.txt
truncate_results:
\techo truncate_results >> build/order.txt
export_submission:
\t@echo "WARNING: This script cannot be executed from within the docker container."
\tmkdir -p ../../build/submission && echo export_submission >> build/order.txt
"""
TOY_MAIN = """\
import os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
with open("build/order.txt", "a") as f:
    f.write(" ".join([args["action"].strip('"'), args["benchmarks"], args["scenarios"], args.get("test_mode", ""),
                      args.get("audit_test", "")]).rstrip() + "\\n")
if args["action"].strip('"') == "run_harness":
    time.sleep(1.5)  # long enough for the telemetry beside it to sample
    out = os.path.join(os.environ["LOG_DIR"], "Toy-CPUx2_TRT", args["benchmarks"], args["scenarios"])
    os.makedirs(out, exist_ok=True)
    mode = "AccuracyOnly" if args.get("test_mode") == "AccuracyOnly" else "PerformanceOnly"
    with open(os.path.join(out, "mlperf_log_summary.txt"), "w") as f:
        f.write("================================================\\nMLPerf Results Summary\\n"
                "================================================\\nSUT name : toy\\nScenario : Offline\\n"
                f"Mode     : {mode}\\nSamples per second: 250.5\\nResult is : VALID\\n")
"""
TOY_CONSTANTS = """\
class Benchmark(AliasedNameEnum):
    Toy: AliasedName = AliasedName("toy", ("toy-99",))
class HarnessType(AliasedNameEnum):
    Custom: AliasedName = AliasedName("custom")
G_DEFAULT_HARNESS_TYPES = {Benchmark.Toy: HarnessType.Custom}
"""
TOY_CONFIG = """\
from configs.toy import ToyBase
@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class ToyX2(ToyBase):
    system = KnownSystem.Toy_CPUx2
    offline_expected_qps = 100 * 2
"""


def toy_folder(root: Path) -> Path:
    folder = root / "closed" / "Org"
    files = {"Makefile": TOY_MAKEFILE, "code/__init__.py": "", "code/main.py": TOY_MAIN,
             "code/common/constants.py": TOY_CONSTANTS,
             "code/common/systems/system_list.py": 'add_systems("Toy_CPUx{}", "Toy-CPUx{}", None, None, [2], None)\n',
             "configs/toy/__init__.py": "class ToyBase(BenchmarkConfiguration):\n    scenario = Scenario.Offline\n",
             "configs/toy/Offline/__init__.py": TOY_CONFIG}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_toy_folder_plan(tmp_path: Path) -> None:
    planner = Planner(Spec(code=toy_folder(tmp_path), system_id="Toy-CPUx2", benchmarks=("toy",),
                           scenarios=("Offline",), submitter="Org"))
    assert [u.mode for u in planner.units()] == ["performance", "accuracy", "TEST01", "TEST04"]
    assert planner.accelerators() == 2
    preview = entries(planner.spec)
    assert {e["user_conf"] for e in preview["entries"]} == {"*.Offline.target_qps = 200\n"}


@pytest.mark.integration
def test_vendor_flow_runs_in_order(tmp_path: Path) -> None:
    """Snakemake runs the folder's own targets natively in its working copy: image left out (native), build, data,
    engines once, performance and accuracy, staging before the audits, the audits one after another, compliance
    staging, truncation, export; the submitter's folder is not written; the report has throughput per accelerator."""
    from tests.conftest import snakemake

    sys.path.insert(0, str(Path(__file__).parent))
    from test_telemetry_replay import GPU_A, gpu_trace

    folder = toy_folder(tmp_path / "src")
    out = tmp_path / "out"
    (tmp_path / "trace.json").write_text(json.dumps({"devices": [gpu_trace(GPU_A, seconds=600)]}))
    (tmp_path / "cfg.yaml").write_text(json.dumps({
        "outdir": str(out), "engine": "native",
        "telemetry": {"enabled": True, "hz": 20, "backend": f"replay:{tmp_path / 'trace.json'}"},
        "inference": {"vendor": {"code": str(folder), "system_id": "Toy-CPUx2", "benchmarks": ["toy"],
                                 "scenarios": ["Offline"]}}}))
    snakemake(tmp_path, "vendor_export", "vendor_report", "inference_preview", "--configfile",
              str(tmp_path / "cfg.yaml"))
    assert not (folder / "build").exists()
    work = out / "inference_vendor" / "work"
    order = (work / "closed" / "mlrepro" / "build" / "order.txt").read_text().splitlines()
    assert order[:5] == ["build", "download_model toy", "download_data toy",
                         f"preprocess_data toy {out / 'inference_vendor' / 'scratch'}",
                         "generate_engines toy Offline"]
    runs = order[5:7]
    assert sorted(runs) == ["run_harness toy Offline", "run_harness toy Offline AccuracyOnly"]
    assert order[7:] == ["stage_results mlrepro", "run_audit_harness toy Offline  TEST01",
                         "run_audit_harness toy Offline  TEST04", "stage_compliance", "truncate_results",
                         "export_submission"]
    assert (work / "build" / "submission").is_dir()
    record = json.loads((out / "inference_vendor" / "jobs" / "run" / "toy" / "Offline" / "performance.json")
                        .read_text())
    assert record["result"]["value"] == 250.5 and record["result"]["per_accelerator"] == 250.5 / 2
    # the telemetry beside the run (a replayed GPU): its accelerator energy over the run's window
    energy = record["result"]["accelerator_energy_j"]
    assert isinstance(energy, float) and energy > 0, record["telemetry"]
    assert f"250.5,samples/s,True,2,125.25,{energy}" in (out / "inference_vendor" / "report.csv").read_text()
    preview = json.loads((out / "inference_preview.json").read_text())
    assert [e["mode"] for e in preview["entries"]] == ["performance", "accuracy", "TEST01", "TEST04"]


# --- hostile folders and configs: read as text, refused with the file named, never run
def test_include_outside_the_folder_refused(tmp_path: Path) -> None:
    folder = toy_folder(tmp_path)
    (tmp_path / "evil.mk").write_text("run_harness:\n\ttouch PWNED\n")
    (folder / "Makefile").write_text("include $(CURDIR)/../../evil.mk\n" + TOY_MAKEFILE)
    with pytest.raises(ValueError, match=r"include '\.\./\.\./evil\.mk' lies outside the code folder"):
        flow.Flow.read(folder)


def test_linked_makefile_refused(tmp_path: Path) -> None:
    folder = toy_folder(tmp_path)
    (tmp_path / "elsewhere").write_text(TOY_MAKEFILE)
    (folder / "Makefile").unlink()
    (folder / "Makefile").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="never through a link"):
        flow.Flow.read(folder)


def test_config_code_is_never_run(tmp_path: Path) -> None:
    """A config whose value is a call is not evaluated: the preview names it and nothing ran."""
    folder = toy_folder(tmp_path)
    (folder / "configs/toy/Offline/__init__.py").write_text(TOY_CONFIG.replace(
        "100 * 2", "__import__('os').system('touch " + str(tmp_path / "PWNED") + "')"))
    with pytest.raises(ValueError, match=r"no number for offline_expected_qps .*__import__"):
        entries(Spec(code=folder, system_id="Toy_CPUx2", benchmarks=("toy",), scenarios=("Offline",), submitter="o"))
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(("key", "value"), [("run_args", ["--x=1; touch PWNED"]), ("run_args", ["$(shell id)"]),
                                            ("submitter", "a b"), ("system_id", "x/../y")])
def test_shell_words_refused_by_the_schema(key: str, value: object) -> None:
    from mlrepro import config

    vendor = {"code": "c", "system_id": "s", "benchmarks": ["resnet50"], "scenarios": ["Offline"], key: value}
    with pytest.raises(ValueError, match=f"inference.vendor.{key}"):
        config.load({"inference": {"vendor": vendor}})


def test_preview_without_a_vendor_says_what_to_set(tmp_path: Path) -> None:
    from mlrepro.inference.vendor import preview
    from tests.conftest import make_job

    with pytest.raises(ValueError, match=r"inference\.vendor is not set"):
        preview.job(make_job("inference_preview", output={"out": tmp_path / "p.json"}, params={"vendor": None,
                                                                                                 "org": "o"}))
    assert not (tmp_path / "p.json").exists()


def test_system_names_that_would_reach_a_shell_refused(tmp_path: Path) -> None:
    folder = toy_folder(tmp_path)
    (folder / "code/common/systems/system_list.py").write_text(
        'add_systems("Toy;touch PWNED;x{}", "Toy-CPUx{}", None, None, [2], None)\n')
    with pytest.raises(ValueError, match="characters outside"):
        Planner(Spec(code=folder, system_id="Toy-CPUx2", benchmarks=("toy",), scenarios=("Offline",), submitter="o"))
