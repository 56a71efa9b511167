"""RNN-T (rnnt): the greedy transcript of each utterance as int64 word tokens (variable length, as
accuracy_eval.py reads them); WER over the utterances LoadGen logged. The round's target is on 100 - WER."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlrepro.inference.models import checkpointed


class RNNTServed:
    metric = "100 - word error rate (%)"

    def __init__(self, data_dir: Path, params: dict[str, Any], checkpoint: Path, device: torch.device) -> None:
        self.module, self.workload = checkpointed("rnnt", data_dir, params, checkpoint, device)
        self.max_symbols = params["eval_max_symbols"]
        self.count = len(self.workload.eval_refs)

    @torch.inference_mode()
    def predict(self, indices: np.ndarray) -> list[np.ndarray]:
        ev = self.workload.held_out
        idx = torch.from_numpy(indices).to(ev["frames"].device)
        frames = ev["frames"][idx]
        # trimmed to this batch's longest utterance: the encoder is unidirectional, padding after an
        # utterance never reaches it
        hyps = self.module.greedy_decode(self.workload.model, ev["feats"][idx, : int(frames.max())], frames,
                                         self.max_symbols)
        return [np.array(h, dtype=np.int64) for h in hyps]

    def _wer(self, responses: dict[int, bytes]) -> float:
        indices = sorted(responses)
        return 100.0 * self.module.word_error_rate([self.workload.eval_refs[i] for i in indices],
                                                   [np.frombuffer(responses[i], dtype=np.int64).tolist()
                                                    for i in indices])

    def accuracy(self, responses: dict[int, bytes]) -> float:
        return 100.0 - self._wer(responses)

    def reference(self) -> float:
        return 100.0 - 100.0 * self.workload.evaluate(0)

    @staticmethod
    def accuracy_line(value: float) -> str:
        return f"Word Error Rate: {100.0 - value:.4f}%, accuracy={value:.4f}%"
