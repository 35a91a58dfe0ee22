"""signSGD with majority vote, and Signum.

Bernstein, Wang, Azizzadenesheli & Anandkumar, "signSGD: Compressed Optimisation for Non-Convex
Problems", ICML 2018; Bernstein, Zhao, Azizzadenesheli & Anandkumar, "signSGD with Majority Vote
is Communication Efficient and Fault Tolerant", ICLR 2019. Each rank sends the signs of its
gradient; the aggregate is the sign of their sum (the majority vote):

    rank r:     s_r = sign(g_r)                     1 bit an element
    aggregate:  sign(sum_r s_r)                     in {-1, 0, +1}; 0 where the vote ties
    optimizer:  x <- x - lr * aggregate

``momentum=beta > 0`` is Signum: each rank keeps m <- beta * m + (1 - beta) * g per parameter and
sends sign(m) (the ICLR 2019 paper's distributed Signum, momentum on the workers).

The learning rate: every element of every compressed parameter moves by exactly ``lr`` per step
(or stays, on a tie), whatever the gradient's scale. Use plain SGD without momentum
(``torch.optim.SGD(params, lr=...)``; pass ``momentum=`` here for Signum), with a learning rate
like Adam's, typically 1e-4 to 1e-3, not SGD's 0.1. ``op=hvd.Average`` and ``hvd.Sum`` give the
same vote.

Payload: the sign bits packed 8 to a byte (element 8b+j in bit j of byte b): ceil(n/8) bytes,
32x smaller than fp32. Cost: one pass to pack (two with momentum), one to unpack each payload.
The packing is OneBit's kernel with fixed levels -1 and +1 (kernels/signsgd_cpu.py).

Decisions where the papers are silent:

* sign(0): one bit cannot carry 0, so a zero entry (a dead unit, an unused embedding row) votes
  +1, as in GRACE's implementation. A tied vote gives 0 (``finish``: torch.sign), so at an even
  number of ranks disagreement does not drift every tied element by -lr each step.
* Defaults differ from the other methods, because the vote must reach every parameter:
  ``error_feedback=False`` (the papers' method has none; ``True`` is allowed and keeps
  acc - sign(acc), of magnitude about 1 whatever the gradient, which swamps it: for a sign
  compressor with error feedback use ``efsignsgd``); ``min_numel=0``, since a tensor sent dense
  through Horovod would get the plain averaged gradient, which at signSGD's learning rate barely
  moves; ``communication="allgather"``, as the paper implements it. ``"twophase"`` is accepted
  without momentum, but there the re-compressed vote is one bit again, so ties become +1;
  ``"auto"`` and ``"dense"`` are refused (dense would average instead of vote). With momentum
  only ``"allgather"``: two-phase would apply the momentum again to the reduced chunk.
* Sparse gradients and tensors below a user-set ``min_numel`` still go dense: averaged, not voted.
* The momentum buffer is kept per piece (``self.states``, state.py), fp32, starting at zero, and
  checkpointed with ``state_dict()`` (this rank's own: not loaded from another rank's).
"""
from typing import Any

import torch

from ..compressor import Compressor
from ..options import is_number, require
from ..kernels import arrays
from ..payload import exact_length


class SignSGD(Compressor):
    """``SignSGD(momentum=0.0)``: majority vote of signs; ``momentum > 0`` gives Signum."""

    name = "signsgd"
    PAPER = 'Bernstein et al., ICML 2018 / ICLR 2019'
    PAYLOAD = 'one sign bit per element; the aggregate is the majority vote, so every element moves by exactly lr: plain SGD, lr about 1e-4..1e-3'
    EXAMPLES = ('signsgd', 'signsgd:error_feedback=true')
    ROUTES = ("allgather", "twophase")
    LOCAL_STATE = ("momentum",)

    def __init__(self, *, momentum: float = 0.0, error_feedback: bool = False, min_numel: int = 0,
                 communication: str = "allgather", **kwargs: Any) -> None:
        require(is_number(momentum) and 0 <= momentum < 1, "momentum", "a number in [0, 1)", momentum)
        allowed = self.ROUTES[:1] if momentum else self.ROUTES
        require(communication in allowed, "communication",
                f"one of {allowed} for signsgd{' with momentum' if momentum else ''} (a majority "
                "vote: dense would average, two-phase would re-apply momentum)", communication)
        super().__init__(error_feedback=error_feedback, min_numel=min_numel,
                         communication=communication, **kwargs)
        self.momentum = momentum

    def options(self) -> dict[str, Any]:
        return {**super().options(), "momentum": self.momentum}

    def expected_bytes(self, numel: int, shape: torch.Size) -> float:
        return (numel + 7) // 8

    def encode(self, acc: torch.Tensor, grad: torch.Tensor, shape: torch.Size,
               key: str = "") -> torch.Tensor:
        if self.momentum:
            m = self.states.get(key, lambda: {"momentum": torch.zeros_like(acc)})["momentum"]
            arrays.kernels("momentum", acc).accumulate(acc, grad.to(torch.float32), m,
                                                       self.momentum, 1.0 - self.momentum)
        return arrays.kernels("signsgd", acc).pack(acc)

    def decode_add(self, payload: torch.Tensor, out: torch.Tensor, shape: torch.Size) -> None:
        """Checks the length, exactly ceil(n / 8) bytes, before adding (PayloadError
        otherwise, payload.py; O(1), about 0.2 us): nothing else addresses memory."""
        exact_length(payload, (out.numel() + 7) // 8, out)
        arrays.kernels("signsgd", out).unpack_add(payload, out)

    def aggregate(self, total: torch.Tensor) -> None:
        total.sign_()
