"""What a compressor counts for ``stats()``: bytes per tensor and seconds per phase.

The communicators call ``count`` once per tensor and step with the bytes they handed Horovod,
and time their phases with ``timed``: about a microsecond a block, for the breakdown of the
compressed path (bench/breakdown.py).
"""
import time
from contextlib import contextmanager
from typing import Any, Iterator

from .state import Guarded

#: the phases ``timed`` measures: gradient + residual, the finite check, encoding and framing
#: (PowerSGD: the factors' products and orthogonalization); blocked on a collective;
#: unframing, decoding and the aggregate (two-phase: also its region's sum, re-compressed)
PHASES = ("compress", "wait", "decode")


class Accounting(Guarded):
    def __init__(self) -> None:
        super().__init__()
        self._steps: dict[str, int] = {}
        self._per_tensor: dict[str, dict[str, int]] = {}
        self._dense_bytes = 0
        self._sent_bytes = 0
        self._seconds: dict[str, float] = {}
        #: what communication="auto" measured, tried and chose (communication/planner.py)
        self.plan: dict[str, Any] = {}

    def count(self, name: str | None, numel: int, sent: int) -> None:
        """One tensor's step: ``numel`` fp32 elements sent as ``sent`` bytes (``name`` None:
        a tensor Horovod sent dense, counted in the totals only)."""
        with self._lock:
            if name is not None:
                self._steps[name] = self._steps.get(name, 0) + 1
                tensor = self._per_tensor.setdefault(name, {"dense_bytes": 0, "sent_bytes": 0})
                tensor["dense_bytes"] += 4 * numel
                tensor["sent_bytes"] += sent
            self._dense_bytes += 4 * numel
            self._sent_bytes += sent

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Adds the wall-clock seconds of the block to ``phase`` (one of ``PHASES``)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            with self._lock:
                self._seconds[phase] = self._seconds.get(phase, 0.0) + seconds

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"steps": max(self._steps.values(), default=0),
                    "dense_bytes": self._dense_bytes, "sent_bytes": self._sent_bytes,
                    "per_tensor": {k: dict(v) for k, v in self._per_tensor.items()},
                    "seconds": dict(self._seconds), "plan": dict(self.plan)}
