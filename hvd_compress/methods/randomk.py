"""Random-k sparsification with error feedback.

Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory", NeurIPS 2018. Per parameter, each
step: acc = gradient + residual (the paper's memory); send the entries of acc at k =
ceil(ratio * n) indices drawn uniformly without replacement; residual = acc with them zeroed.
Receivers add each rank's values at the indices its seed names.

Payload: the seed (int64, 8 bytes), then the k float32 values in index-generation order:
8 + 4k bytes, half of TopK's for the same k, since indices do not travel. Cost: O(k) to encode
and to decode a payload (kernels/randomk_cpu.py: index j is the image of j under a seeded
pseudo-random permutation of range(n), so no pass over the n entries is needed).

Decisions where the paper is silent:

* Without replacement (the paper's rand-k is a random subset of size k): every sent entry is a
  distinct coordinate, so the k values carry k coordinates' worth of information and
  scatter-adding them is race-free on a GPU. With replacement, duplicates would waste slots and
  need deduplication before the residual is zeroed.
* Shared seeds: the seed of an encode hashes the ``seed`` option, how many times this buffer has
  been encoded, and its length. Ranks that encode a tensor equally often (every step in which
  they all have its gradient) draw the same indices, so the aggregate is dense on only k
  coordinates; a rank that skipped a step (no gradient) draws its own indices from then on,
  which is still correct, since every payload carries its seed and decoding needs no state.
  Pieces (the two-phase allreduce) count their own encodes. The count is kept per piece
  (``self.states``, state.py) and checkpointed with ``state_dict()``.
* No rescaling by n/k: with memory the paper sends the entries as they are (the unsent part
  stays in the residual). With ``error_feedback=False`` the update is therefore k/n of the
  gradient in expectation; that setting is an ablation, not the paper's method.
* ``expected_bytes`` is exact.
"""
from typing import Any

import numpy as np
import torch

from ..compressor import Compressor
from ..options import is_int, ratio as check_ratio, require
from ..kernels import arrays, counter_rng
from ..payload import entry_count


class RandomK(Compressor):
    """``RandomK(ratio=0.01, seed=0)``."""

    name = "randomk"
    PAPER = 'Stich et al., NeurIPS 2018'
    PAYLOAD = 'an 8-byte seed and k float32 values: the indices come from the seed, shared by all ranks'
    EXAMPLES = ('randomk:ratio=0.05', 'randomk:ratio=0.3,seed=5')

    def __init__(self, ratio: float = 0.01, *, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_ratio(ratio)
        require(is_int(seed) and seed >= 0, "seed", "an int >= 0", seed)
        self.ratio = ratio
        self.seed = seed

    def options(self) -> dict[str, Any]:
        return {**super().options(), "ratio": self.ratio, "seed": self.seed}

    def k(self, numel: int) -> int:
        return min(numel, max(1, int(np.ceil(self.ratio * numel))))

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        return 8 + 4 * self.k(numel)

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        count = self.states.get(key, lambda: {"steps": 0})
        seed = counter_rng.step_seed(self.seed, count["steps"], acc.numel())
        count["steps"] += 1
        values = arrays.kernels("randomk", acc).select(acc, self.k(acc.numel()), seed)
        return arrays.join([torch.tensor([seed], dtype=torch.int64, device=acc.device), values])

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """Checks the length, the seed and 4 bytes a value, at most ``out.numel()`` values,
        before adding (PayloadError otherwise, payload.py; O(1), about 0.2 us). Any seed is
        sound: its indices are a permutation's images, all inside ``out``."""
        if not entry_count(payload, 8, 4, out):
            return
        arrays.kernels("randomk", out).decode_add(payload[:8].view(torch.int64),
                                                  payload[8:].view(torch.float32), out)
