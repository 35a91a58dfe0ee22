"""1-bit quantization with error feedback.

Seide et al., "1-Bit Stochastic Gradient Descent and its Application to Data-Parallel
Distributed Training of Speech DNNs", Interspeech 2014. Per parameter, each step:
acc = gradient + residual; bit_i = [acc_i >= 0]; rebuilt_i = high if bit_i else low, where
high = mean of the non-negative entries and low = mean of the negative ones;
residual = acc - rebuilt. ``scaling="l1"`` is the scaled sign of Karimireddy et al., "Error
Feedback Fixes SignSGD", ICML 2019: high = ||acc||_1 / n, low = -high.

``granularity="tensor"`` keeps one (low, high) pair per tensor; ``"column"`` one per column of
the gradient viewed as (shape[0], rest), as the paper does for weight matrices.

Payload: the low values (float32, one per group), the high values, then the bits packed 8 to a
byte: n/8 + 8*groups bytes, 32x smaller than fp32 for a per-tensor scale.
"""
from typing import Any

import torch

from ..compressor import Compressor
from ..options import one_of
from ..kernels import arrays
from ..payload import exact_length

SCALINGS = ("means", "l1")
GRANULARITIES = ("tensor", "column")


class OneBit(Compressor):
    """``OneBit(scaling="means", granularity="tensor")``.

    In the two-phase allreduce (communication/twophase.py) every chunk of about n/p elements
    gets its own (low, high) pair, whatever ``granularity`` says.
    """

    name = "onebit"
    PAPER = 'Seide et al., Interspeech 2014'
    PAYLOAD = 'one bit per element, packed 8 to a byte, and two float32 per tensor (or per column, or per two-phase chunk)'
    EXAMPLES = ('onebit', 'onebit:communication=twophase', 'onebit:scaling=l1,granularity=column')

    def __init__(self, *, scaling: str = "means", granularity: str = "tensor", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        one_of("scaling", scaling, SCALINGS)
        one_of("granularity", granularity, GRANULARITIES)
        self.scaling = scaling
        self.granularity = granularity

    def options(self) -> dict[str, Any]:
        return {**super().options(), "scaling": self.scaling, "granularity": self.granularity}

    def groups(self, numel: int, shape: torch.Size) -> int:
        """How many (low, high) pairs ``numel`` elements of a gradient of ``shape`` get: one per
        column for a whole tensor with ``granularity="column"``, else one."""
        if self.granularity == "column" and len(shape) >= 2 and numel == shape.numel():
            return numel // shape[0]
        return 1

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        return (numel + 7) // 8 + 8 * self.groups(numel, shape)

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        return arrays.join(arrays.kernels("onebit", acc).quantize(acc, self.groups(acc.numel(), shape),
                                                                 self.scaling))

    def fold_encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
                    keep: bool, key: str = "") -> torch.Tensor | None:
        # On fp32 CPU gradients the fold and the finite check run inside the pass that sums
        # the signs' groups (kernels/onebit_cpu.py, fold_quantize).
        if not arrays.one_pass_cpu(acc, grad):
            return super().fold_encode(acc, grad, shape, keep, key)
        quantized = arrays.kernels("onebit", acc).fold_quantize(acc, grad, keep, self.groups(acc.numel(), shape),
                                                                self.scaling)
        return None if quantized is None else arrays.join(quantized)

    def _decoded_groups(self, payloads: list[torch.Tensor], out: torch.Tensor,
                        shape: torch.Size) -> int:
        """The group count of payloads for ``out``, after checking that each is as long as
        that layout's: the kernels read no further (PayloadError otherwise, payload.py)."""
        groups = self.groups(out.numel(), shape)
        for payload in payloads:
            exact_length(payload, 8 * groups + (out.numel() + 7) // 8, out)
        return groups

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """Checks the length, exactly the scales and bits of ``out``'s layout, before adding
        (PayloadError otherwise, payload.py): nothing else in the payload addresses memory.
        O(1), about 0.3 us a payload; a flipped scale or bit decodes to other values."""
        groups = self._decoded_groups([payload], out, shape)
        scales = payload[:8 * groups].view(torch.float32)
        arrays.kernels("onebit", out).dequantize_add(payload[8 * groups:], scales[:groups], scales[groups:], out)

    def decode_add_all(self, payloads: list[torch.Tensor], out: torch.Tensor, shape: torch.Size) -> None:
        if arrays.on_cuda(out):
            return super().decode_add_all(payloads, out, shape)
        groups = self._decoded_groups(payloads, out, shape)
        buffer, starts, _ = arrays.spans(payloads)
        arrays.kernels("onebit", out).dequantize_add_all(buffer, starts, groups, out)
