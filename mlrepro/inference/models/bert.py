"""BERT (bert-99): the mini masked language model's predicted token at every position, int32, logged per
sequence. Its metric is the training's, masked-token accuracy. Each masked position is a question with a
one-token answer, for which SQuAD's exact match and F1 are both that accuracy: accuracy.txt states it in
accuracy-squad.py's {"exact_match", "f1"} line, which the official checker reads for bert."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.inference.models import checkpointed


class BertServed:
    metric = "masked-token accuracy (%)"

    def __init__(self, data_dir: Path, params: dict[str, Any], checkpoint: Path, device: torch.device) -> None:
        self.module, self.workload = checkpointed("bert", data_dir, params, checkpoint, device)
        self.labels = self.workload.eval_labels.cpu().numpy()
        self.count = len(self.labels)

    @torch.inference_mode()
    def predict(self, indices: np.ndarray) -> np.ndarray:
        w = self.workload
        return w.model(w.eval_inputs[torch.from_numpy(indices)]).argmax(-1).to(torch.int32).cpu().numpy()

    def accuracy(self, responses: dict[int, bytes]) -> float:
        correct = total = 0
        for i, data in responses.items():
            asked = self.labels[i] != self.module.IGNORE
            correct += int((np.frombuffer(data, dtype=np.int32)[asked] == self.labels[i][asked]).sum())
            total += int(asked.sum())
        return 100.0 * correct / max(total, 1)

    def reference(self) -> float:
        return 100.0 * self.workload.evaluate(0)

    @staticmethod
    def accuracy_line(value: float) -> str:
        return f'{{"exact_match": {value:.4f}, "f1": {value:.4f}}}'
