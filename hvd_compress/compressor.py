"""The base of every hvd_compress method.

A compressor is two things at once:

* a Horovod compression object (``compress``/``decompress``), which Horovod calls for tensors
  that take its own dense allreduce path. There it is a no-op, exactly like
  ``horovod.torch.Compression.none``, so dense tensors travel as Horovod sends them;
* a codec for everything else: ``encode`` turns gradient + residual into a byte payload and
  leaves the new residual behind; ``decode_add`` adds one payload's contribution to a sum, and
  ``decode_add_all`` the payloads of every rank for one tensor, in rank order (by default a loop
  over ``decode_add``; TopK, OneBit and AdaComp decode them in one kernel call).

How payloads travel is the communicator's business (``hvd_compress/communication``).
"""
import os
import threading
import warnings
from typing import Any

import torch

from .memory import NoMemory, ResidualMemory, fold

COMPRESSIBLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: the ``communication=`` choices every method takes (hvd_compress/communication/route.py)
COMMUNICATIONS = ("auto", "allgather", "twophase", "dense")


def require(ok: bool, argument: str, allowed: str, value: Any) -> None:
    """Raises the ValueError a bad constructor argument gets: its name, what is allowed, what
    was given."""
    if not ok:
        raise ValueError(f"{argument} must be {allowed}, got {value!r}")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def default_link_gbit() -> float:
    """The link rate ``communication="auto"`` plans for when a compressor is built without
    ``link_gbit``: ``HVD_COMPRESS_LINK_GBIT`` from the environment (so a job launched with
    ``horovodrun -x HVD_COMPRESS_LINK_GBIT=10`` plans for 10 Gbit/s without a change to the
    script), else 1 Gbit/s. A compressor's spec() carries the rate it was built with, so
    ranks that disagree are caught by the agreement check."""
    value = os.environ.get("HVD_COMPRESS_LINK_GBIT", "1")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"HVD_COMPRESS_LINK_GBIT must be a number > 0, got {value!r}") from None


def one_of(argument: str, value: Any, allowed: tuple) -> None:
    require(value in allowed, argument, f"one of {allowed}", value)


class Compressor:
    #: the name ``from_spec`` knows this method by
    name = "base"

    def __init__(self, *, error_feedback: bool = True, min_numel: int = 1024,
                 communication: str = "auto", link_gbit: float | None = None) -> None:
        if link_gbit is None:
            link_gbit = default_link_gbit()
        require(isinstance(error_feedback, bool), "error_feedback", "True or False", error_feedback)
        require(is_int(min_numel) and min_numel >= 0, "min_numel", "an int >= 0", min_numel)
        one_of("communication", communication, COMMUNICATIONS)
        require(isinstance(link_gbit, (int, float)) and not isinstance(link_gbit, bool)
                and link_gbit > 0, "link_gbit", "a number > 0", link_gbit)
        self.error_feedback = error_feedback
        self.min_numel = min_numel
        #: how payloads travel (hvd_compress/communication/route.py): "auto" picks per tensor
        self.communication = communication
        #: the link rate "auto" plans for, Gbit/s
        self.link_gbit = link_gbit
        self.memory = ResidualMemory() if error_feedback else NoMemory()
        self._lock = threading.Lock()
        self._steps: dict[str, int] = {}
        self._per_tensor: dict[str, dict[str, int]] = {}
        self._dense_bytes = 0
        self._sent_bytes = 0
        self._seconds: dict[str, float] = {}
        self._serves: list[str] | None = None  # the parameter names of the optimizer it serves

    def serve(self, parameter_names: list[str]) -> None:
        """Called when a DistributedOptimizer is built with this compressor. Residuals are kept
        by parameter name, for one optimizer: a second optimizer (a GAN's generator and
        discriminator, both nn.Sequential with "0.weight") would mix its residuals with the
        first's, so it is refused."""
        if self._serves is not None:
            raise ValueError(
                f"hvd_compress: this {type(self).__name__} already serves a DistributedOptimizer "
                f"(parameters {', '.join(self._serves[:3])}{', ...' if len(self._serves) > 3 else ''}); "
                "a compressor keeps residuals for one optimizer. Give each optimizer its own: "
                f"compression=hvd_compress.from_spec({self.spec()!r})")
        self._serves = parameter_names

    # --- Horovod's compression interface, used on the dense path -------------------------
    def compress(self, tensor: torch.Tensor) -> tuple[torch.Tensor, None]:
        self._count(None, tensor.numel(), tensor.numel() * tensor.element_size())
        return tensor, None

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        return tensor

    # --- the codec -------------------------------------------------------------------------
    def compressible(self, grad: torch.Tensor) -> bool:
        """Dense floating-point gradients of at least ``min_numel`` elements are compressed;
        smaller ones (biases, norm layers) and other dtypes go through Horovod's dense path."""
        return (grad.layout == torch.strided and grad.dtype in COMPRESSIBLE_DTYPES
                and grad.numel() >= max(1, self.min_numel))

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """Compresses ``acc`` (flat fp32: gradient + residual) into a uint8 payload and subtracts
        what the payload carries from ``acc``, leaving the new residual there.

        ``acc`` is a whole parameter's gradient or, in the two-phase allreduce, a contiguous
        piece of it; ``grad`` is the matching flat piece of this step's gradient (any float
        dtype), for methods that look at it; ``shape`` is the whole parameter's shape, for
        per-layer choices. A payload layout that follows the shape (OneBit's per-column scales)
        applies only to a whole tensor (``acc.numel() == shape.numel()``)."""
        raise NotImplementedError

    def fold_encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
                    keep: bool) -> torch.Tensor | None:
        """``acc += grad`` (``keep``: error feedback) or ``acc = grad``, then ``encode``: the
        payload, or None when ``grad`` holds NaN or Inf (``acc`` then holds anything; the
        caller clears it). ``acc`` is a parameter's residual (flat fp32), or a contiguous piece
        of it (a two-phase chunk), ``grad`` the matching flat gradient. Methods override it to fold, check and encode in fewer passes over the
        data than the two calls make; the payload and the residual left in ``acc`` must stay
        bitwise those of the two calls."""
        if not fold(acc, grad, keep):
            return None
        return self.encode(acc, grad, shape)

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """Adds what ``payload`` carries to ``out`` (flat fp32, the piece ``payload`` was
        encoded from; ``shape`` as in ``encode``)."""
        raise NotImplementedError

    def decode_add_all(self, payloads: list[torch.Tensor], out: torch.Tensor, shape: torch.Size) -> None:
        """``decode_add`` of every payload (non-empty, all encoded from the piece ``out`` is),
        in order. Methods override it to decode them in one kernel call; the sum must stay
        bitwise that of this loop."""
        for payload in payloads:
            self.decode_add(payload, out, shape)

    def finish(self, total: torch.Tensor) -> None:
        """Turns ``total`` (flat fp32: the decoded payloads of every rank, summed, or averaged
        when the optimizer averages) into the aggregate this method defines, in place. The
        identity for every method whose aggregate is that sum; a majority vote takes its
        sign. The two-phase allreduce applies it to each reduced region and to the result."""

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        """About how many payload bytes ``encode`` makes of ``numel`` elements of a parameter of
        ``shape``: what ``communication="auto"`` and the cost model plan with."""
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        """The constructor arguments that define this compressor (for specs and fingerprints)."""
        return {"error_feedback": self.error_feedback, "min_numel": self.min_numel,
                "communication": self.communication, "link_gbit": self.link_gbit}

    def spec(self) -> str:
        """The ``from_spec`` string that rebuilds this compressor."""
        opts = ",".join(f"{k}={v}" for k, v in sorted(self.options().items()))
        return f"{self.name}:{opts}"

    # --- training state -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The residuals (training state: unsent gradient) by parameter name, the two-phase
        allreduce's server-side ones as ``NAME#server``, and the rank and world size they belong
        to; save it with the model and optimizer, one file per rank (README, Checkpoints)."""
        rank, size = _position()
        return {"spec": self.spec(), "rank": rank, "world_size": size,
                "residuals": {k: v.detach().clone() for k, v in self.memory.residuals().items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` saved.

        Residuals are per rank: each is gradient its rank computed and has not sent. A state
        saved by another rank (every rank loading rank 0's checkpoint) is not applied: the
        residuals start from zero, with a warning (what is lost is at most one step's
        compression error per parameter). A state saved at another world size keeps the worker
        residuals and drops the two-phase server ones, whose chunks no longer exist. Residuals
        whose size no longer fits are dropped at their next use."""
        if state.get("spec") != self.spec():
            raise ValueError(f"state_dict is for {state.get('spec')!r}, this is {self.spec()!r}")
        rank, size = _position()
        residuals = state["residuals"]
        if None not in (rank, state.get("rank")) and state["rank"] != rank:
            warnings.warn(
                f"hvd_compress: this checkpoint holds rank {state['rank']}'s residuals and this is "
                f"rank {rank}; residuals are per rank, so they start from zero here. For an exact "
                "resume save each rank's compressor.state_dict() (README, Checkpoints)", stacklevel=2)
            residuals = {}
        elif None not in (size, state.get("world_size")) and state["world_size"] != size:
            residuals = {k: v for k, v in residuals.items() if not k.endswith("#server")}
        self.memory.load(residuals)

    # --- accounting --------------------------------------------------------------------------
    def _count(self, name: str | None, numel: int, sent: int) -> None:
        with self._lock:
            if name is not None:
                self._steps[name] = self._steps.get(name, 0) + 1
                tensor = self._per_tensor.setdefault(name, {"dense_bytes": 0, "sent_bytes": 0})
                tensor["dense_bytes"] += 4 * numel
                tensor["sent_bytes"] += sent
            self._dense_bytes += 4 * numel
            self._sent_bytes += sent

    def _time(self, phase: str, seconds: float) -> None:
        with self._lock:
            self._seconds[phase] = self._seconds.get(phase, 0.0) + seconds

    def stats(self) -> dict[str, Any]:
        """Cumulative counts for this rank: ``steps`` (communication rounds of the most often
        sent tensor), ``dense_bytes`` (what dense fp32 would have sent), ``sent_bytes`` (bytes
        handed to Horovod, payload headers included), ``per_tensor``: those two byte counts
        for each compressed parameter, by name, and ``seconds``: wall-clock seconds of the
        compressed path by phase (communication/base.py, ``timed``)."""
        with self._lock:
            return {"steps": max(self._steps.values(), default=0),
                    "dense_bytes": self._dense_bytes, "sent_bytes": self._sent_bytes,
                    "per_tensor": {k: dict(v) for k, v in self._per_tensor.items()},
                    "seconds": dict(self._seconds)}

    def __repr__(self) -> str:
        return f"hvd_compress.from_spec({self.spec()!r})"


def _position() -> tuple[int | None, int | None]:
    """(rank, world size) when Horovod is initialized, else (None, None)."""
    import horovod.torch as hvd

    if not hvd.is_initialized():
        return None, None
    return hvd.rank(), hvd.size()
