"""The MLPerf Inference rounds a package may declare (config ``inference.round``): the facts of each round that
the runs, the package and its checks follow.

- v2.0, the seed documents' round (the default). LoadGen 6.0.17 compiles in v6.1's mlperf.conf, so v2.0's
  values for our models are stated here (:data:`V2_0_CONF`) and written into the user.conf of every run; its
  seeds, which LoadGen reads from its built-in conf only, are set on the TestSettings by hand
  (mlrepro/inference/run.py).
- v6.1, the round of LoadGen 6.0.x: its built-in mlperf.conf is the round's.

Model names, required scenarios per system type and dataset sizes are those the round's official submission
checker holds (mlcommons/inference tools/submission at tag v2.0, and main at 2026-08-20 for v6.1).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from mlrepro.core.errors import MlreproError
from mlrepro.inference.calibrate import stated

ROUNDS = ("v2.0", "v6.1")
SERVED = ("dlrm", "bert", "resnet", "ssd", "rnnt", "unet3d")  # the seed's inference table, in its order
DEFAULT = "v2.0"

# The lines of mlcommons/inference mlperf.conf at tag v2.0 (commit 33894a19c4af6207f7cfdda75f84570f04836de5)
# for the six models of the seed documents' table (ssd-mobilenet left out): the round's official values.
V2_0_CONF = """\
# MLPerf Inference v2.0 mlperf.conf values for resnet50, ssd-resnet34, bert, dlrm, rnnt and 3d-unet
# (mlcommons/inference tag v2.0, mlperf.conf). LoadGen reads the seeds from its built-in conf only:
# mlrepro sets them on the TestSettings of every timed run.
resnet50.*.performance_sample_count_override = 1024
ssd-resnet34.*.performance_sample_count_override = 64
bert.*.performance_sample_count_override = 10833
dlrm.*.performance_sample_count_override = 204800
rnnt.*.performance_sample_count_override = 2513
3d-unet.*.performance_sample_count_override = 0
*.*.qsl_rng_seed = 6655344265603136530
*.*.sample_index_rng_seed = 15863379492028895792
*.*.schedule_rng_seed = 12662793979680847247
*.SingleStream.target_latency_percentile = 90
*.SingleStream.min_duration = 600000
*.SingleStream.min_query_count = 1024
*.MultiStream.target_latency_percentile = 99
*.MultiStream.samples_per_query = 8
*.MultiStream.min_duration = 600000
*.MultiStream.min_query_count = 270336
ssd-resnet34.MultiStream.target_latency = 528
3d-unet.*.sample_concatenate_permutation = 1
*.Server.target_latency = 10
*.Server.target_latency_percentile = 99
*.Server.target_duration = 0
*.Server.min_duration = 600000
*.Server.min_query_count = 270336
resnet50.Server.target_latency = 15
ssd-resnet34.Server.target_latency = 100
bert.Server.target_latency = 130
dlrm.Server.target_latency = 30
rnnt.Server.target_latency = 1000
*.Offline.target_latency_percentile = 90
*.Offline.min_duration = 600000
*.Offline.min_query_count = 24576
"""
SEED_KEYS = ("qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed")
# The round's keys a user.conf may carry that bind a submission (the SUT's statements, target_qps and the
# SingleStream/MultiStream target_latency, are measured: mlrepro/inference/calibrate.py).
BINDING_KEYS = ("performance_sample_count_override", "min_duration", "min_query_count", "target_latency_percentile",
                "samples_per_query")


# The line each model's accuracy script prints (the official checker reads its first group from accuracy.txt):
# accuracy-imagenet.py, accuracy-coco.py, accuracy-squad.py, accuracy-dlrm.py, accuracy_eval.py (rnnt) and
# accuracy_kits.py (3d-unet), at both rounds.
ACCURACY_LINES = {
    "accuracy": r"^accuracy=([\d.]+)", "mAP": r"^mAP=([\d.]+)",
    "F1": r"""^\{["']exact_match["']:\s*[\d.]+,\s*["']f1["']:\s*([\d.]+)\}""", "AUC": r"^AUC=([\d.]+)",
    "WER": r"^Word Error Rate:.*, accuracy=([\d.]+)%", "DICE": r"^Accuracy:\s*mean\s*=\s*([\d.]+)",
}
ACCURACY_KIND = {"resnet": "accuracy", "ssd": "mAP", "bert": "F1", "dlrm": "AUC", "rnnt": "WER", "unet3d": "DICE"}


class RoundError(MlreproError, ValueError):
    pass


_CONF_HEAD = b"# The format of this config file is 'key = value'."


@functools.cache
def builtin_mlperf_conf() -> str:
    """The mlperf.conf compiled into the installed LoadGen (its mlperf_conf.h is one string constant in
    the extension): the wheel ships no separate copy."""
    import mlperf_loadgen

    data = Path(mlperf_loadgen.__file__).read_bytes()
    start = data.find(_CONF_HEAD)
    if start < 0:
        raise RuntimeError(f"{mlperf_loadgen.__file__}: no built-in mlperf.conf found in this LoadGen build")
    return data[start : data.find(b"\0", start)].decode("utf-8")


@dataclass(frozen=True)
class Audits:
    """A round's audit tests as its checker requires them (mlcommons/inference compliance/ at the round's
    commit). A test is verified as one unit (its run_verification.py) from one or more LoadGen runs, each in a
    working folder of its own holding its audit.config; the runs' names are the folders the checker reads."""

    folder: str  # where the tests lie in a checkout of mlcommons/inference
    runs: dict[str, tuple[str, ...]]  # test -> its LoadGen runs (v2.0's TEST04: TEST04-A and TEST04-B)
    models: dict[str, tuple[str, ...] | None]  # test -> the package models it is required of (None: all)
    settings: dict[str, str]  # LoadGen run -> its audit.config lines ("{sampling}": TEST01's per-model target)
    sampling: dict[str, int]  # LoadGen model -> TEST01's accuracy_log_sampling_target (its own audit.config)
    in_results: bool  # v6.0 on: TEST0x/ in the results scenario folder; before: compliance/<sys>/<model>/<scen>/
    scripts: str  # the verification scripts the round ships, "v2.0" or "v6.1" (mlrepro/inference/audit_verify.py)

    def tests(self, model: str) -> list[str]:
        """The tests the round's checker requires of ``model`` (a package model name), in order."""
        return [t for t, models in self.models.items() if models is None or model in models]

    def audit_config(self, run: str, loadgen_model: str) -> str:
        """The lines of ``run``'s audit.config for ``loadgen_model`` (the values of the round's own file)."""
        return self.settings[run].format(sampling=self.sampling.get(loadgen_model, 0))


# TEST01 (every model): responses logged in performance mode; TEST04 (v2.0: A unique samples, B one sample again
# and again): no result caching; TEST05 (v2.0): other seeds. The values are those of the round's audit.config files.
_TEST01 = """\
*.*.mode = 2
*.*.accuracy_log_rng_seed = 720381539243781796
*.*.accuracy_log_sampling_target = {sampling}
"""
_SCENARIO_LINES = ("MultiStream", "Offline", "SingleStream", "Server")
_UNIQUE = "".join(f"*.{s}.mode = 2\n*.{s}.performance_issue_unique = 1\n*.{s}.performance_issue_same = 0\n"
                  for s in _SCENARIO_LINES)
_SAME = "".join(f"*.{s}.mode = 2\n*.{s}.performance_issue_unique = 0\n*.{s}.performance_issue_same = 1\n"
                f"*.{s}.performance_issue_same_index = 3\n" for s in _SCENARIO_LINES)
_TEST05 = """\
*.*.mode = 2
*.*.qsl_rng_seed = 313588358309856706
*.*.sample_index_rng_seed = 471397156132239067
*.*.schedule_rng_seed = 413914573387865862
"""
# TEST01's accuracy_log_sampling_target per model folder of compliance/.../TEST01/ (the same at both rounds for
# the models served)
_SAMPLING = {"resnet50": 4096, "ssd-resnet34": 256, "bert": 4096, "dlrm": 4096, "rnnt": 4096, "3d-unet": 64}


@dataclass(frozen=True)
class Round:
    name: str
    models: dict[str, str]  # our benchmark -> its folder in the package (the name the round's checker knows)
    loadgen_models: dict[str, str]  # our benchmark -> its name in the round's mlperf.conf
    required: dict[str, dict[str, tuple[str, ...]]]  # system type -> package model -> required scenarios
    dataset_size: dict[str, int]  # package model -> samples in the round's full accuracy set
    server_result: str  # the detail-log key of Server's result
    results_hold_measurements: bool  # v6.0 on: measurements.json, user.conf, README.md in results/.../<scenario>/
    code_dir: str  # "code" (v2.0 to v5.1) or "src" (v6.0 on)
    system_fields: tuple[str, ...]  # system JSON fields the round adds to v2.0's
    conf_text: str | None  # the round's mlperf.conf values; None: LoadGen's built-in conf is this round's
    audits: Audits | None = None  # the round's audit tests (compliance/ of mlcommons/inference)

    def model(self, benchmark: str) -> str:
        if benchmark not in self.models:
            raise RoundError(f"inference.round {self.name} has no model for benchmark {benchmark!r} (it has "
                             f"{', '.join(sorted(self.models))}); serve it under another round or leave it out "
                             "of inference.benchmarks")
        return self.models[benchmark]

    def loadgen_model(self, benchmark: str) -> str:
        self.model(benchmark)
        return self.loadgen_models[benchmark]

    def quality_fraction(self, benchmark: str) -> float:
        """The share of the FP32 reference's accuracy the round's target is: 99.9% for the -99.9 variants, 99%
        for every other model of the seed's six (the rounds' accuracy-target tables)."""
        return 0.999 if self.model(benchmark).endswith("-99.9") else 0.99

    def conf(self) -> str:
        return self.conf_text if self.conf_text is not None else builtin_mlperf_conf()

    def value(self, benchmark: str, scenario: str, key: str) -> str | None:
        """``key`` for ``benchmark``'s ``scenario`` as the round's mlperf.conf gives it (LoadGen's lookup order)."""
        return stated(self.conf(), self.loadgen_model(benchmark), scenario, key)

    def int_value(self, benchmark: str, scenario: str, key: str) -> int:
        value = self.value(benchmark, scenario, key)
        return int(value) if value is not None else 0

    def seeds(self) -> dict[str, int]:
        return {key: int(stated(self.conf(), "*", "*", key) or 0) for key in SEED_KEYS}

    def required_scenarios(self, system_type: str, model: str) -> tuple[str, ...] | None:
        """What a system of ``system_type`` ("datacenter,edge" or either) must submit of ``model``; None: the
        type has no such category."""
        kind = ",".join(sorted(system_type.split(",")))
        return self.required.get(kind, {}).get(model)

    def system_type(self, served: dict[str, set[str]]) -> str:
        """The category ``served`` (package model -> scenarios) submits to: datacenter for a Server result or a
        model the round has only there (DLRM), edge for SingleStream/MultiStream results; both when both."""
        kinds = []
        if any("Server" in scens or self.required_scenarios("edge", model) is None for model, scens in served.items()):
            kinds.append("datacenter")
        if any(scens & {"SingleStream", "MultiStream"} for scens in served.values()) or not kinds:
            kinds.append("edge")
        return ",".join(kinds)

    def served_benchmarks(self) -> list[str]:
        """The benchmarks of ours this round has a model for, in the seed table's order (``benchmarks: all``)."""
        return [b for b in SERVED if b in self.models]

    def served_scenarios(self, benchmarks: list[str], scenarios: list[str]) -> dict[str, list[str]]:
        """benchmark -> the scenarios of ``scenarios`` it runs: those the round requires of it for the system type
        all of ``scenarios`` make (rnnt has no MultiStream, dlrm no SingleStream, 3d-unet no Server ...)."""
        kind = self.system_type({self.model(b): set(scenarios) for b in benchmarks})
        served = {b: [s for s in scenarios if s in (self.required_scenarios(kind, self.model(b)) or ())]
                  for b in benchmarks}
        for b, scens in served.items():
            if not scens:
                raise RoundError(f"inference.scenarios {', '.join(scenarios)}: a {kind} system submits "
                                 f"{self.model(b)} at {self.name} in "
                                 f"{', '.join(self.required_scenarios(kind, self.model(b)) or ('none',))} only; "
                                 f"add one of those or leave {b} out of inference.benchmarks")
        return served


# Required scenarios (submission-checker.py at v2.0, MODEL_CONFIG["v2.0"]; submission_checker/constants.py
# at v6.1), for the models mlrepro serves.
_V2_0_REQUIRED = {
    "datacenter": {"resnet50": ("Server", "Offline"), "ssd-resnet34": ("Server", "Offline"),
                   "rnnt": ("Server", "Offline"), "bert-99": ("Server", "Offline"), "dlrm-99": ("Server", "Offline"),
                   "3d-unet-99": ("Offline",)},
    "edge": {"resnet50": ("SingleStream", "MultiStream", "Offline"),
             "ssd-resnet34": ("SingleStream", "MultiStream", "Offline"), "rnnt": ("SingleStream", "Offline"),
             "bert-99": ("SingleStream", "Offline"), "3d-unet-99": ("SingleStream", "Offline")},
    "datacenter,edge": {"resnet50": ("SingleStream", "MultiStream", "Server", "Offline"),
                        "ssd-resnet34": ("SingleStream", "MultiStream", "Server", "Offline"),
                        "rnnt": ("SingleStream", "Server", "Offline"), "bert-99": ("SingleStream", "Server", "Offline"),
                        "dlrm-99": ("Server", "Offline"), "3d-unet-99": ("SingleStream", "Offline")},
}
_V6_1_REQUIRED = {
    "datacenter": {"resnet": ("Server", "Offline"), "bert-99": ("Server", "Offline"), "3d-unet-99": ("Offline",)},
    "edge": {"resnet": ("SingleStream", "MultiStream", "Offline"), "bert-99": ("SingleStream", "Offline"),
             "3d-unet-99": ("SingleStream", "Offline")},
    "datacenter,edge": {"resnet": ("SingleStream", "MultiStream", "Server", "Offline"),
                        "bert-99": ("SingleStream", "Offline"), "3d-unet-99": ("SingleStream", "Offline")},
}

ROUND_FACTS = {
    "v2.0": Round(
        name="v2.0",
        # the folder names of the published v2.0 results; the 99% accuracy variants
        models={"resnet": "resnet50", "ssd": "ssd-resnet34", "bert": "bert-99", "dlrm": "dlrm-99", "rnnt": "rnnt",
                "unet3d": "3d-unet-99"},
        loadgen_models={"resnet": "resnet50", "ssd": "ssd-resnet34", "bert": "bert", "dlrm": "dlrm", "rnnt": "rnnt",
                        "unet3d": "3d-unet"},
        required=_V2_0_REQUIRED,
        # the reference accuracy sets (ImageNet 2012 val, COCO 2017 val at 1200x1200, SQuAD v1.1 dev, LibriSpeech
        # dev-clean, KiTS19's 42 validation cases); DLRM's Criteo day 23 is not stated by the v2.0 checker
        dataset_size={"resnet50": 50_000, "ssd-resnet34": 5_000, "bert-99": 10_833, "rnnt": 2_513, "3d-unet-99": 42},
        server_result="result_scheduled_samples_per_sec",
        results_hold_measurements=False, code_dir="code", system_fields=(), conf_text=V2_0_CONF,
        # submission-checker.py check_compliance_dir: TEST04 exempt for rnnt, bert, dlrm and 3d-unet
        audits=Audits(folder="compliance/nvidia",
                      runs={"TEST01": ("TEST01",), "TEST04": ("TEST04-A", "TEST04-B"), "TEST05": ("TEST05",)},
                      models={"TEST01": None, "TEST04": ("resnet50", "ssd-resnet34", "ssd-mobilenet"), "TEST05": None},
                      settings={"TEST01": _TEST01, "TEST04-A": _UNIQUE, "TEST04-B": _SAME, "TEST05": _TEST05},
                      sampling=_SAMPLING, in_results=False, scripts="v2.0")),
    "v6.1": Round(
        name="v6.1",
        # v6.1 keeps resnet, bert and 3d-unet of the seed's six (retinanet, dlrm-v2 and rnnt were retired)
        models={"resnet": "resnet", "bert": "bert-99", "unet3d": "3d-unet-99"},
        loadgen_models={"resnet": "resnet50", "bert": "bert", "unet3d": "3d-unet"},
        required=_V6_1_REQUIRED,
        dataset_size={"resnet": 50_000, "bert-99": 10_833, "3d-unet-99": 43},
        server_result="result_completed_samples_per_sec",
        results_hold_measurements=True, code_dir="src",
        system_fields=("host_network_card_count", "system_type_detail"), conf_text=None,
        # submission_checker/constants.py models_TEST01 and models_TEST04 (TEST06 to TEST09: LLMs and DLRMv3)
        audits=Audits(folder="compliance", runs={"TEST01": ("TEST01",), "TEST04": ("TEST04",)},
                      models={"TEST01": ("resnet", "bert-99", "bert-99.9", "3d-unet-99", "3d-unet-99.9"),
                              "TEST04": ("resnet",)},
                      settings={"TEST01": _TEST01, "TEST04": _SAME}, sampling=_SAMPLING, in_results=True,
                      scripts="v6.1")),
}


@functools.cache
def get(name: str) -> Round:
    if name not in ROUND_FACTS:
        raise RoundError(f"inference.round {name!r} is not known; mlrepro follows {', '.join(ROUNDS)}")
    return ROUND_FACTS[name]
