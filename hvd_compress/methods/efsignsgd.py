"""EF-SignSGD: scaled sign compression with error feedback.

Karimireddy, Rebjock, Stich & Jaggi, "Error Feedback Fixes SignSGD and other Gradient
Compression Schemes", ICML 2019. Per parameter, each step: p = gradient + residual;
send (||p||_1 / n) * sign(p); residual = p - what was sent.

That is exactly ``OneBit(scaling="l1", granularity="tensor")`` (methods/onebit.py: algorithm,
payload, kernels, the two-phase behaviour), so this is a name for it, not a second
implementation: ``from_spec("efsignsgd")``. Payload: ceil(n/8) bytes of sign bits plus two
float32 (the scale and its negation): n/8 + 8 bytes.

Where it departs from the paper: the paper compresses lr * p (the step); we compress the
gradient and the optimizer multiplies by lr afterwards, which is the same while lr is constant
(the scaled sign is positively homogeneous); after a learning-rate change the residual still
holds gradient from before it, in gradient units. sign(0) is +1 (OneBit's bit rule). With
several ranks each compresses its own p and the decoded signs are averaged, as in the paper's
distributed experiments.
"""
from typing import Any

from .onebit import OneBit

FIXED = {"scaling": "l1", "granularity": "tensor"}


class EFSignSGD(OneBit):
    """``EFSignSGD()``: ``OneBit(scaling="l1", granularity="tensor")`` under its paper's name."""

    name = "efsignsgd"
    PAPER = 'Karimireddy et al., ICML 2019'
    PAYLOAD = 'OneBit with scaling="l1": one bit per element and the L1 scale'
    EXAMPLES = ('efsignsgd',)

    def __init__(self, **kwargs: Any) -> None:
        fixed = sorted(set(kwargs) & set(FIXED))
        if fixed:
            raise ValueError(f"efsignsgd fixes {', '.join(f'{k}={FIXED[k]!r}' for k in fixed)}; "
                             "use onebit to choose them")
        super().__init__(**FIXED, **kwargs)

    def options(self) -> dict[str, Any]:
        return {k: v for k, v in super().options().items() if k not in FIXED}
