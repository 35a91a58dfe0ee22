"""Error feedback (Seide et al. 2014; Karimireddy et al. 2019): what a compressor did not send
this step is kept per parameter and added to the next step's gradient.

A memory hands the compressor one fp32 buffer per parameter holding gradient + residual. The
kernels subtract what they send from that buffer in place, so after compression it holds the new
residual and no second pass is needed. Residuals are fp32 whatever the gradient's dtype.

Folding the gradient into the buffer and checking it for NaN and Inf is one pass over the
gradient (``kernels/compensate_cpu.py``) for fp32 gradients on the CPU; other dtypes and devices
take two torch passes.
"""
import torch

from .kernels import arrays, compensate_cpu
from .state import Guarded


def fold(buf: torch.Tensor, grad: torch.Tensor, keep: bool) -> bool:
    """``buf += grad`` (``keep``) or ``buf = grad``; returns whether ``grad`` is finite."""
    flat = grad.detach().reshape(-1)
    if flat.device.type == "cpu" and flat.dtype == torch.float32:
        return compensate_cpu.fold(arrays.view(buf), arrays.view(flat), keep) == 0
    # the largest magnitude is finite iff every entry is (NaN propagates): no n-sized bool mask
    finite = not flat.numel() or bool(torch.isfinite(torch.linalg.vector_norm(flat, float("inf"))))
    buf.add_(flat) if keep else buf.copy_(flat)
    return finite


class ResidualMemory(Guarded):
    """Keeps each parameter's unsent remainder and adds it to its next gradient."""

    #: whether the residual is added to the next gradient (False: dropped)
    keeps = True

    def __init__(self) -> None:
        super().__init__()
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """``name``'s residual (flat fp32, on ``like``'s device, zeros at first use or when
        ``like``'s size changed), to fold a gradient into (``Compressor.fold_encode``)."""
        with self._lock:
            buf = self._buffers.get(name)
            if buf is not None and buf.device != like.device and buf.numel() == like.numel():
                buf = self._buffers[name] = buf.to(like.device)  # e.g. loaded from a CPU checkpoint
            if buf is None or buf.numel() != like.numel():
                buf = self._buffers[name] = torch.zeros(like.numel(), dtype=torch.float32,
                                                        device=like.device)
            return buf

    def compensate_checked(self, name: str, grad: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """(the buffer holding grad + residual, flat, fp32; whether grad is finite).
        Compression edits the buffer in place."""
        buf = self.buffer(name, grad)
        return buf, fold(buf, grad, self.keeps)

    def compensate(self, name: str, grad: torch.Tensor) -> torch.Tensor:
        """The buffer holding grad + residual, flat, fp32; compression edits it in place."""
        return self.compensate_checked(name, grad)[0]

    def pop(self, name: str) -> torch.Tensor | None:
        """Removes ``name``'s residual and returns it (None if it has none)."""
        with self._lock:
            return self._buffers.pop(name, None)

    def residuals(self) -> dict[str, torch.Tensor]:
        with self._lock:
            return dict(self._buffers)

    def load(self, residuals: dict[str, torch.Tensor]) -> None:
        """Replaces every residual by a copy of the given ones (fp32, flat)."""
        with self._lock:
            self._buffers = {name: r.detach().to(torch.float32).reshape(-1).clone()
                             for name, r in residuals.items()}


class NoMemory(ResidualMemory):
    """Plain lossy compression (for ablations): what is not sent is dropped."""

    keeps = False
