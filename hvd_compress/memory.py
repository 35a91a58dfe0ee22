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
            fresh = buf is None or buf.numel() != like.numel() or buf.device != like.device
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


class NoMemory(ResidualMemory):
    """Plain lossy compression (for ablations): what is not sent is dropped."""

    def compensate(self, name: str, grad: torch.Tensor) -> torch.Tensor:
        buf, _ = self._buffer(name, grad)
        buf.copy_(grad.reshape(-1))
        return buf
