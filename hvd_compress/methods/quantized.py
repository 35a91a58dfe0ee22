"""What the byte-code quantizers (qsgd, terngrad, u8bit, natural) share: a payload of float32
scales and packed codes (kernels/quantize.py), and the seeds of their stochastic rounding.

Payload: the scales (float32, one per bucket, or one for a whole-piece scheme), then the codes
(``8 // bits`` to a byte): ``Scheme.payload_bytes``, which ``expected_bytes`` returns exactly.
Scales differ per rank, so payloads cannot be summed on the wire: they travel by allgather or
two-phase, as ``communication`` chooses (communication/route.py).

Randomness: a rank's rounding noise is its own. The seed of an encode hashes the ``seed``
option, the rank (``noise_rank``: Horovod's or torch.distributed's rank, options.position,
or 0 before either is initialized), the piece's
length and how many times this piece has been encoded (``self.states``, checkpointed),
and entry i of the piece draws ``counter_rng.uniform(seed, i)``. Decoding draws nothing, so
every rank decodes every payload to the same bits and ranks stay bitwise identical. Pieces of
one tensor with the same length (two-phase chunks) encoded by one rank in one step share a
seed: each entry's rounding is still unbiased, the pieces' noise is correlated.
"""
from typing import Any

import numpy as np
import torch

from ..compressor import Compressor
from ..options import is_int, position, require
from ..kernels import arrays, counter_rng, quantize
from ..payload import exact_length


class Quantized(Compressor):
    """The base of QSGD, TernGrad, U8Bit and Natural; not in the catalogue itself."""

    def __init__(self, scheme: quantize.Scheme, bucket_size: int, *, seed: int | None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        require(is_int(bucket_size) and bucket_size >= 1, "bucket_size", "an int >= 1", bucket_size)
        if seed is not None:
            require(is_int(seed) and seed >= 0, "seed", "an int >= 0", seed)
        self.scheme = scheme
        self.bucket_size = bucket_size
        self.seed = seed
        #: the rank that seeds this compressor's noise; None: Horovod's or torch.distributed's
        #: rank (options.position; 0 before init).
        #: A single-process simulation of several ranks sets it (tests/test_horovod.py).
        self.noise_rank: int | None = None

    def options(self) -> dict[str, Any]:
        seed = {} if self.seed is None else {"seed": self.seed}
        return {**super().options(), **seed}

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        return self.scheme.payload_bytes(numel, self.bucket_size)

    def clip_bound(self, acc: torch.Tensor) -> float:
        """The magnitude entries are clipped to before quantizing (TernGrad); infinity: none."""
        return np.inf

    def _rank(self) -> int:
        if self.noise_rank is not None:
            return self.noise_rank
        return position()[0] or 0

    def _encode_seed(self, key: str, n: int) -> int:
        if self.seed is None:  # deterministic rounding
            return 0
        count = self.states.get(key, lambda: {"steps": 0})
        seed = counter_rng.step_seed(counter_rng.step_seed(self.seed, self._rank(), n), count["steps"], n)
        count["steps"] += 1
        return seed

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        scales, codes = quantize.encode(arrays.kernels("quantize", acc, convert=False), arrays.view(acc), self.scheme,
                                        self.bucket_size, self._encode_seed(key, acc.numel()),
                                        self.clip_bound(acc))
        return arrays.join([arrays.tensor(scales, acc), arrays.tensor(codes, acc)])

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """Checks the length, exactly the scales and codes of ``out``'s buckets, before adding
        (PayloadError otherwise, payload.py; O(1), about 0.2 us): every code is a field of the
        table, so nothing else in the payload addresses memory."""
        exact_length(payload, self.scheme.payload_bytes(out.numel(), self.bucket_size), out)
        split = 4 * self.scheme.buckets(out.numel(), self.bucket_size)
        quantize.decode_add(arrays.kernels("quantize", out, convert=False), arrays.view(payload[:split].view(torch.float32)),
                            arrays.view(payload[split:]), arrays.view(out), self.scheme, self.bucket_size)
