"""The contract every hvd_compress method implements.

A compressor is two things at once:

* a Horovod compression object (``compress``/``decompress``), which Horovod calls for tensors
  that take its own dense allreduce path. There it is a no-op, exactly like
  ``horovod.torch.Compression.none``, so dense tensors travel as Horovod sends them;
* a codec for everything else: ``encode`` turns gradient + residual into a byte payload and
  leaves the new residual behind; ``decode_add`` adds one payload's contribution to a sum, and
  ``decode_add_all`` the payloads of every rank for one tensor, in rank order (by default a loop
  over ``decode_add``; TopK, OneBit and AdaComp decode them in one kernel call); ``aggregate``
  turns the decoded sum into the method's aggregate (a majority vote's sign).

A method declares, beside its codec: its ``name`` (for ``from_spec``), its options
(``options()``), the routes its payloads may take (``ROUTES``: communication/route.py decides
among them), its payload size (``expected_bytes``, what routes are planned with), which of its
state is the rank's own (``LOCAL_STATE``), and for the catalogue its ``PAPER``, ``PAYLOAD`` and
``EXAMPLES``. A method is one file in methods/ and its line in methods/__init__.py: the tests,
the benches and the method table (docs/methods.md) take the catalogue from there.

Around the contract, each in the module its name says: argument checking (options.py), the
error-feedback residuals (memory.py), per-piece state and checkpoints (state.py), byte and time
counts (accounting.py). How payloads travel is the communicator's business (communication/).
"""
import warnings
from typing import Any

import torch

from .accounting import Accounting
from .memory import NoMemory, ResidualMemory, fold
from .options import ROUTES, default_link_gbit, is_int, is_number, one_of, position, require
from .state import Guarded, ParameterStates, of_partition

COMPRESSIBLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Compressor(Guarded):
    #: the name ``from_spec`` knows this method by
    name = "base"
    #: the paper, and what crosses the wire (docs/methods.md's method table is generated from them)
    PAPER = ""
    PAYLOAD = ""
    #: specs of the configurations the catalogue's tests run (tests/catalogue.py), defaults first
    EXAMPLES: tuple[str, ...] = ()
    #: the ``communication=`` values this method accepts (the first one is its default)
    ROUTES: tuple[str, ...] = ROUTES
    #: fields of a piece's state (``states``) that hold this rank's own gradient data: like
    #: residuals, they are not loaded from another rank's checkpoint
    LOCAL_STATE: tuple[str, ...] = ()

    def __init__(self, *, error_feedback: bool = True, min_numel: int = 1024,
                 communication: str | None = None, link_gbit: float | None = None) -> None:
        super().__init__()
        communication = self.ROUTES[0] if communication is None else communication
        link_gbit = default_link_gbit() if link_gbit is None else link_gbit
        require(isinstance(error_feedback, bool), "error_feedback", "True or False", error_feedback)
        require(is_int(min_numel) and min_numel >= 0, "min_numel", "an int >= 0", min_numel)
        one_of("communication", communication, self.ROUTES)
        require(link_gbit is None or (is_number(link_gbit) and link_gbit > 0),
                "link_gbit", "a number > 0, or None (measured)", link_gbit)
        self.error_feedback = error_feedback
        self.min_numel = min_numel
        #: how payloads travel (hvd_compress/communication/route.py): "auto" picks per tensor
        self.communication = communication
        #: the link rate "auto" plans for, Gbit/s; None: measured, and plans tried for real
        #: (communication/planner.py)
        self.link_gbit = link_gbit
        self.memory = ResidualMemory() if error_feedback else NoMemory()
        #: per-piece state beyond the residual, by key (state.py)
        self.states = ParameterStates()
        self.accounting = Accounting()
        #: the routes a checkpoint's measured plan took (communication/planner.py resumes them)
        self.resumed_routes: dict[str, str] | None = None
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

    def check_optimizer(self, param_groups: list[dict[str, Any]]) -> None:
        """Refuses, with a ValueError that says the fix, an optimizer this method cannot work
        with (called before Horovod wraps it). Every optimizer is fine by default."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._serves = None  # a copy serves no optimizer yet

    # --- Horovod's compression interface, used on the dense path -------------------------
    def compress(self, tensor: torch.Tensor) -> tuple[torch.Tensor, None]:
        self.accounting.count(None, tensor.numel(), tensor.numel() * tensor.element_size())
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

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        """Compresses ``acc`` (flat fp32: gradient + residual) into a uint8 payload and subtracts
        what the payload carries from ``acc``, leaving the new residual there.

        ``acc`` is a whole parameter's gradient or, in the two-phase allreduce, a contiguous
        piece of it; ``grad`` is the matching flat piece of this step's gradient (any float
        dtype), for methods that look at it; ``shape`` is the whole parameter's shape, for
        per-layer choices; ``key`` names the piece (state.py: the parameter's name for a whole
        one), for methods that keep state in ``self.states``. A payload layout that follows the
        shape (OneBit's per-column scales) applies only to a whole tensor
        (``acc.numel() == shape.numel()``)."""
        raise NotImplementedError

    def fold_encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
                    keep: bool, key: str = "") -> torch.Tensor | None:
        """``acc += grad`` (``keep``: error feedback) or ``acc = grad``, then ``encode``: the
        payload, or None when ``grad`` holds NaN or Inf (``acc`` then holds anything; the
        caller clears it, and ``encode`` did not run, so no state moved). Methods override it
        to fold, check and encode in fewer passes over the data than the two calls make; the
        payload and the residual left in ``acc`` must stay bitwise those of the two calls."""
        if not fold(acc, grad, keep):
            return None
        return self.encode(acc, grad, shape, key)

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

    def aggregate(self, total: torch.Tensor) -> None:
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
        """Everything this compressor needs to resume bitwise: the residuals (unsent gradient)
        and the method's per-piece state (state.py), by key, and the rank and world size they
        belong to. Save it with the model and optimizer, one file per rank (README,
        "Checkpoints")."""
        rank, size = position()
        return {"spec": self.spec(), "rank": rank, "world_size": size,
                "residuals": {k: v.detach().clone() for k, v in self.memory.residuals().items()},
                "states": self.states.export(),
                "routes": self.accounting.plan.get("routes")
                if self.accounting.plan.get("state") in ("final", "confirming") else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` saved.

        Residuals (and a method's ``LOCAL_STATE`` fields, such as DGC's velocity) are per rank:
        gradient its rank computed and has not sent. A state saved by another rank (every rank
        loading rank 0's checkpoint) does not apply them: they start from zero, with a warning
        (what is lost is at most one step's compression error per parameter); the rest of the
        method's state (counters, PowerSGD's Q, which every rank holds alike) is loaded. A state
        saved at another world size drops what belongs to the old two-phase partition (chunk
        and server keys), and the routes ``communication="auto"`` had measured and chosen (at the
        same world size they are taken again without new trials, so the resume stays bitwise).
        Residuals whose size no longer fits are dropped at their next use."""
        if state.get("spec") != self.spec():
            raise ValueError(f"state_dict is for {state.get('spec')!r}, this is {self.spec()!r}")
        rank, size = position()
        residuals, states = state["residuals"], state.get("states", {})
        if None not in (rank, state.get("rank")) and state["rank"] != rank:
            warnings.warn(
                f"hvd_compress: this checkpoint holds rank {state['rank']}'s residuals and this is "
                f"rank {rank}; residuals are per rank, so they start from zero here. For an exact "
                "resume save each rank's compressor.state_dict() (README, Checkpoints)", stacklevel=2)
            residuals = {}
            states = {k: {f: v for f, v in s.items() if f not in self.LOCAL_STATE}
                      for k, s in states.items()}
        if None not in (size, state.get("world_size")) and state["world_size"] != size:
            residuals = {k: v for k, v in residuals.items() if not of_partition(k)}
            states = {k: s for k, s in states.items() if not of_partition(k)}
        else:
            self.resumed_routes = state.get("routes")
        self.memory.load(residuals)
        self.states.load(states)

    def stats(self) -> dict[str, Any]:
        """Cumulative counts for this rank: ``steps`` (communication rounds of the most often
        sent tensor), ``dense_bytes`` (what dense fp32 would have sent), ``sent_bytes`` (bytes
        handed to Horovod, payload headers included), ``per_tensor``: those two byte counts
        for each compressed parameter, by name, and ``seconds``: wall-clock seconds of the
        compressed path by phase (accounting.py)."""
        return self.accounting.stats()

    def __repr__(self) -> str:
        return f"hvd_compress.from_spec({self.spec()!r})"
