"""Threshold sparsification with error feedback.

Strom, "Scalable Distributed DNN Training Using Commodity GPU Cloud Computing", Interspeech
2015; GRACE's ``threshold`` compressor (Xu et al., "GRACE: A Compressed Communication Framework
for Distributed Machine Learning", ICDCS 2021). Per parameter, each step: acc = gradient +
residual; send every entry with |acc| > ``threshold`` as (value, index); residual = acc with
them zeroed. Receivers scatter-add every rank's pairs (TopK's decoder).

Payload: the entry count c (int32), then c float32 values, then c int32 indices ascending:
4 + 8c bytes. c depends on the data: it is whatever exceeds the threshold, from none to all.
Cost: two passes over n to select (topk_cpu's count and take, kernels/threshold_cpu.py), O(c p)
to decode on p ranks.

Decisions where the paper is silent or where we depart from it:

* Values, as GRACE sends, not Strom's +-threshold (1 sign bit + index, 4 bytes an entry). Strom
  sends sign * threshold and keeps acc - sign * threshold, so a large entry drains over many
  steps at threshold per step and the update lags the gradient; values send each selected entry
  whole and leave it at zero, at 8 bytes an entry (AdaComp in this package already covers the
  sign-and-scale payload).
* Strictly greater than the threshold, as Strom writes it (GRACE takes >=).
* The count header keeps the payload non-empty when nothing exceeds the threshold: an empty body
  means "no gradient on this rank" to the communicators (communication/base.py).
* The threshold is absolute, in gradient units: it does not adapt to the gradient's scale, so it
  must be tuned per model (and revisited when the learning rate or the loss scale changes).
* ``expected_bytes`` (what ``communication="auto"`` plans with) cannot know c, and every rank
  must plan the same route, so it assumes a density of ``ASSUMED_DENSITY`` (1%); force
  ``communication=`` when the real density is far from it.
"""
from typing import Any

import numpy as np
import torch

from ..compressor import Compressor
from ..options import require
from ..kernels import arrays
from ..payload import add_pairs

ASSUMED_DENSITY = 0.01


class Threshold(Compressor):
    """``Threshold(threshold=0.01)``: send the entries of gradient + residual above it in magnitude."""

    name = "threshold"
    PAPER = 'Strom, Interspeech 2015'
    PAYLOAD = 'a 4-byte count, then the float32 value + int32 index of every entry above the threshold'
    EXAMPLES = ('threshold:threshold=1.0',)

    def __init__(self, threshold: float = 0.01, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        require(isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
                and 0 < threshold < float(np.finfo(np.float32).max),
                "threshold", "a number > 0 (float32 range)", threshold)  # NaN fails too
        self.threshold = threshold

    def options(self) -> dict[str, Any]:
        return {**super().options(), "threshold": self.threshold}

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        return 4 + 8 * int(np.ceil(ASSUMED_DENSITY * numel))

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        values, indices = arrays.kernels("threshold", acc).select(acc, self.threshold)
        count = torch.tensor([values.numel()], dtype=torch.int32, device=acc.device)
        return arrays.join([count, values, indices])

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """TopK's decoder after the count header, with its checks (the length, and each index
        in the kernel: payload.add_pairs). The count is the length's; the header says the same
        and is not read (sizes need no device sync)."""
        add_pairs(payload, 4, out)
