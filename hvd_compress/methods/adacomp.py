"""Adaptive Residual Gradient Compression (AdaComp).

Chen et al., "AdaComp: Adaptive Residual Gradient Compression for Data-Parallel Distributed
Training", AAAI 2018, arXiv 1712.02679. Per parameter, each step, with gradient dW and
residue R (both flat, fp32):

    G = R + dW                       the residue with this step's gradient
    H = G + dW                       G with the latest gradient counted twice
    g_max(b) = max_{i in b} |G_i|    over bins b of L_T consecutive elements
    send i  iff  |H_i| >= g_max(bin of i) > 0        as (index, sign of G_i)
    scale = mean over all bins of g_max(b)           one float per tensor
    receiver: dW_agg[i] += sign_i * scale
    R <- G - sum over sent i of sign_i * scale * e_i

L_T (``bin_size``) is the only hyper-parameter: the paper uses 50 for convolution layers and
500 for fully connected and recurrent ones; by default we pick 50 for gradients of 3 or more
dimensions (convolution kernels) and 500 otherwise. The number of entries sent adapts to how
active each bin is. We skip bins whose g_max is 0 (nothing to send; the paper's rule would send
zeros). The paper reports about 40x compression for convolution and 200x for fully connected
layers without accuracy loss.

Payload: the scale (float32), then one int32 per sent entry (i, or ~i when G_i < 0): 4 bytes
an entry.
"""
from typing import Any

import torch

from ..compressor import Compressor
from ..options import is_int, require
from ..kernels import arrays
from ..payload import entry_count, indices_inside

CONV_BIN, FC_BIN = 50, 500
# The share of entries AdaComp sends adapts to the gradient. Measured over the first 4 steps of
# synthetic-batch training with error feedback: ResNet-18 conv layers 2-22%, falling fast;
# WideMLP and LeNet-5 fully connected layers 4-9%. What ``communication="auto"`` plans with:
EXPECTED_DENSITY = 0.06


class AdaComp(Compressor):
    """``AdaComp(bin_size=None)``: L_T by shape (50 for conv kernels, 500 otherwise) or fixed."""

    name = "adacomp"
    PAPER = 'Chen et al., AAAI 2018'
    PAYLOAD = 'one float32 scale, then an int32 (index and sign) per entry AdaComp picks'
    EXAMPLES = ('adacomp', 'adacomp:communication=twophase', 'adacomp:bin_size=7')

    def __init__(self, *, bin_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        require(bin_size is None or (is_int(bin_size) and bin_size >= 1),
                "bin_size", "an int >= 1 or None", bin_size)
        self.bin_size = bin_size

    def options(self) -> dict[str, Any]:
        return {**super().options(), "bin_size": self.bin_size}

    def bin_for(self, shape: torch.Size) -> int:
        if self.bin_size is not None:
            return self.bin_size
        return CONV_BIN if len(shape) >= 3 else FC_BIN

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        return 4 + 4 * EXPECTED_DENSITY * numel

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        grad32 = grad.to(torch.float32)  # no copy for fp32 gradients
        return self._payload(*arrays.kernels("adacomp", acc).select(acc, grad32, self.bin_for(shape)), acc)

    def fold_encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
                    keep: bool, key: str = "") -> torch.Tensor | None:
        # On fp32 CPU gradients the fold and the finite check run inside the selection's
        # first pass, a bin at a time (kernels/adacomp_cpu.py, fold_select).
        if not arrays.one_pass_cpu(acc, grad):
            return super().fold_encode(acc, grad, shape, keep, key)
        selected = arrays.kernels("adacomp", acc).fold_select(acc, grad, keep, self.bin_for(shape))
        return None if selected is None else self._payload(*selected, acc)

    @staticmethod
    def _payload(scale: float, codes, like: torch.Tensor) -> torch.Tensor:
        scale = torch.tensor([scale], dtype=torch.float32, device=like.device)
        return arrays.join([scale, codes])

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """Checks, before adding (PayloadError otherwise, payload.py): the length, the scale and
        4 bytes a code, at most ``out.numel()`` codes (O(1): about 0.2 us a payload), and in
        the kernel each code's index (one compare a code; measured no slower than the unchecked
        decode: kernels/adacomp_cpu.py decode_add). On CUDA the kernel counts bad indices on
        the device, and reading the count back is one stream sync a payload."""
        entry_count(payload, 4, 4, out)
        indices_inside(arrays.kernels("adacomp", out).decode_add(
            payload[:4].view(torch.float32), payload[4:].view(torch.int32), out), out)

    def decode_add_all(self, payloads: list[torch.Tensor], out: torch.Tensor, shape: torch.Size) -> None:
        if arrays.on_cuda(out):
            return super().decode_add_all(payloads, out, shape)
        for payload in payloads:
            entry_count(payload, 4, 4, out)
        indices_inside(arrays.kernels("adacomp", out).decode_add_all(*arrays.spans(payloads), out), out)
