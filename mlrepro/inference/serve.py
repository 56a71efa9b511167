"""A training run's checkpoint as what LoadGen serves: the QSL's samples, a prediction per sample as the
bytes LoadGen logs, and the accuracy script that reads them back.

One adapter per served benchmark; each rebuilds the benchmark's own model from minis/<bm>/model.py
(the same file that trained it) and loads the converged run's weights. ResNet and DLRM are here; the
models whose Workload holds their held-out set have a module each in mlrepro/inference/models/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from mlrepro.core.minis import load_module
from mlrepro.inference.models.bert import BertServed
from mlrepro.inference.models.rnnt import RNNTServed
from mlrepro.inference.models.ssd import SSDServed
from mlrepro.inference.models.unet3d import UNet3DServed


class Served(Protocol):
    count: int  # the QSL's samples (the benchmark's held-out set)
    metric: str  # what accuracy() returns, as the inference rules name it (higher is better)

    def predict(self, indices: np.ndarray) -> np.ndarray | list[np.ndarray]:
        """The bytes to log per index: a 2-D array (row i answers indices[i]) or a list of 1-D arrays."""
        ...

    def accuracy(self, responses: dict[int, bytes]) -> float:
        """The metric from LoadGen's accuracy log (qsl index -> logged bytes)."""
        ...

    def reference(self) -> float:
        """The metric of the same weights evaluated directly (FP32, no LoadGen): the quality reference."""
        ...

    @staticmethod
    def accuracy_line(value: float) -> str:
        """``value`` as the round's accuracy script for the model prints it (what the official checker reads)."""
        ...


class ResNetServed:
    """Top-1 classification: the logged bytes are the predicted class as int32 (as accuracy-imagenet.py reads)."""

    metric = "top-1 accuracy (%)"

    def __init__(self, data_dir: Path, params: dict[str, Any], checkpoint: Path, device: torch.device) -> None:
        module = load_module("resnet")
        evals = np.load(data_dir / "eval.npz")
        self.images = torch.from_numpy(evals["images"]).to(device)
        self.labels = evals["labels"]
        self.count = len(self.labels)
        self.model = module.ResNet(params["data"]["classes"], params["width"], params["blocks"]).to(device)
        self.model.load_state_dict(torch.load(checkpoint, map_location=device, weights_only=True))
        self.model.eval()

    @torch.inference_mode()
    def predict(self, indices: np.ndarray) -> np.ndarray:
        logits = self.model(self.images[torch.from_numpy(indices)])
        return logits.argmax(1).to(torch.int32).cpu().numpy().reshape(-1, 1)

    def accuracy(self, responses: dict[int, bytes]) -> float:
        if not responses:
            return 0.0
        good = sum(int(np.frombuffer(data, dtype=np.int32)[0]) == int(self.labels[i]) for i, data in responses.items())
        return 100.0 * good / len(responses)

    def reference(self) -> float:
        preds = np.concatenate([self.predict(np.arange(i, min(i + 512, self.count)))
                                for i in range(0, self.count, 512)])
        return 100.0 * float((preds[:, 0] == self.labels).mean())

    @staticmethod
    def accuracy_line(value: float) -> str:
        return f"accuracy={value:.3f}%"


class DLRMServed:
    """Click-through rate: the logged bytes are the float32 score per sample (as accuracy-dlrm.py reads);
    the metric is ROC AUC over the samples LoadGen logged."""

    metric = "ROC AUC (%)"

    def __init__(self, data_dir: Path, params: dict[str, Any], checkpoint: Path, device: torch.device) -> None:
        self.module = load_module("dlrm")
        evals = np.load(data_dir / "eval.npz")
        self.dense = torch.from_numpy(evals["dense"]).to(device)
        self.cats = torch.from_numpy(evals["cats"].astype(np.int64)).to(device)
        self.labels = evals["labels"]
        self.count = len(self.labels)
        d = params["data"]
        self.model = self.module.DLRM(d["dense_features"], d["categorical_features"], d["cardinality"],
                                      params["embedding_dim"], params["bottom_mlp"], params["top_mlp"]).to(device)
        self.model.load_state_dict(torch.load(checkpoint, map_location=device, weights_only=True))
        self.model.eval()

    @torch.inference_mode()
    def predict(self, indices: np.ndarray) -> np.ndarray:
        idx = torch.from_numpy(indices)
        return self.model(self.dense[idx], self.cats[idx]).float().cpu().numpy().reshape(-1, 1)

    def _auc(self, indices: np.ndarray, scores: np.ndarray) -> float:
        return 100.0 * float(self.module.roc_auc(torch.from_numpy(scores), torch.from_numpy(self.labels[indices])))

    def accuracy(self, responses: dict[int, bytes]) -> float:
        indices = np.array(sorted(responses), dtype=np.int64)
        scores = np.array([np.frombuffer(responses[i], dtype=np.float32)[0] for i in indices], dtype=np.float32)
        return self._auc(indices, scores)

    def reference(self) -> float:
        indices = np.arange(self.count, dtype=np.int64)
        return self._auc(indices, np.concatenate([self.predict(indices[i : i + 4096])[:, 0]
                                                  for i in range(0, self.count, 4096)]))

    @staticmethod
    def accuracy_line(value: float) -> str:
        return f"AUC={value:.3f}%"


ADAPTERS: dict[str, type[Served]] = {
    "resnet": ResNetServed, "dlrm": DLRMServed, "ssd": SSDServed, "bert": BertServed, "rnnt": RNNTServed,
    "unet3d": UNet3DServed}


def served_benchmarks() -> list[str]:
    return sorted(ADAPTERS)


def load(benchmark: str, data_dir: Path, params: dict[str, Any], checkpoint: Path, device: torch.device) -> Served:
    if benchmark not in ADAPTERS:
        raise ValueError(f"inference: no serving adapter for {benchmark!r} (served: {', '.join(served_benchmarks())})")
    return ADAPTERS[benchmark](data_dir, params, checkpoint, device)
