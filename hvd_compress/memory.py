"""Error feedback (Seide et al. 2014; Karimireddy et al. 2019): what a compressor did not send
this step is kept per parameter and added to the next step's gradient.

A memory hands the compressor one fp32 buffer per parameter holding gradient + residual. The
kernels subtract what they send from that buffer in place, so after compression it holds the new
residual and no second pass is needed. Residuals are fp32 whatever the gradient's dtype.
"""
import threading

import torch


class ResidualMemory:
    """Keeps each parameter's unsent remainder and adds it to its next gradient."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._lock = threading.Lock()  # hooks may run on autograd's device threads

    def _buffer(self, name: str, like: torch.Tensor) -> tuple[torch.Tensor, bool]:
        with self._lock:
            buf = self._buffers.get(name)
            if buf is not None and buf.device != like.device and buf.numel() == like.numel():
                buf = self._buffers[name] = buf.to(like.device)  # e.g. loaded from a CPU checkpoint
            fresh = buf is None or buf.numel() != like.numel()
            if fresh:
                buf = torch.zeros(like.numel(), dtype=torch.float32, device=like.device)
                self._buffers[name] = buf
            return buf, fresh

    def compensate(self, name: str, grad: torch.Tensor) -> torch.Tensor:
        """Returns the buffer holding grad + residual, flat, fp32; compression edits it in place."""
        buf, _ = self._buffer(name, grad)
        buf.add_(grad.reshape(-1))
        return buf

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

    def compensate(self, name: str, grad: torch.Tensor) -> torch.Tensor:
        buf, _ = self._buffer(name, grad)
        buf.copy_(grad.reshape(-1))
        return buf
