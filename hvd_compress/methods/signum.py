"""Signum: the sign of momentum, aggregated by majority vote.

Bernstein, Zhao, Azizzadenesheli & Anandkumar, "signSGD with Majority Vote is Communication
Efficient and Fault Tolerant", ICLR 2019 (Signum: Bernstein et al., ICML 2018). Each rank keeps
m <- beta * m + (1 - beta) * g per parameter and sends sign(m); the aggregate is the sign of
the sum of the ranks' signs.

That is ``SignSGD(momentum=beta)`` (methods/signsgd.py: algorithm, payload, vote, what the
learning rate means, and why only the allgather route), so this is a name for it, not a second
implementation: ``from_spec("signum")``, ``momentum=0.9`` by default (the paper's value).
Payload: ceil(n/8) bytes of sign bits.
"""
from typing import Any

from ..options import is_number, require
from .signsgd import SignSGD


class Signum(SignSGD):
    """``Signum(momentum=0.9)``: ``SignSGD`` with worker momentum, under its paper's name."""

    name = "signum"
    PAPER = 'Bernstein et al., ICLR 2019'
    PAYLOAD = "the sign of each rank's momentum, one bit per element, majority vote; plain SGD without momentum"
    EXAMPLES = ('signum',)

    def __init__(self, *, momentum: float = 0.9, **kwargs: Any) -> None:
        require(is_number(momentum) and momentum > 0,
                "momentum", "a number in (0, 1) (momentum=0 is signsgd)", momentum)
        super().__init__(momentum=momentum, **kwargs)
