"""Which way one compressed gradient travels: ``communication="auto"`` and the forced choices.

The routes:

* ``allgather`` (allgather.py): every rank receives every rank's payload. One round of messages
  (fused by Horovod with the step's other allgathers); each worker receives (p-1) payloads.
* ``twophase`` (twophase.py): alltoall of chunks, reduce and re-compress, allgather of regions.
  Each worker sends about 2 payloads whatever p is, but pays a second encode, 2p + 3 encode and
  decode calls, a share of its bucket's alltoall (fusion.py: Horovod does not fuse alltoalls,
  we bucket them) and a round after the backward pass.
* ``dense``: Horovod's own allreduce of the uncompressed gradient.

``auto`` (the default) plans the routes of an optimizer's tensors together (``plan``), once per
Horovod world, under the cost model (cost.py) on a link of the compressor's ``link_gbit``
(default 1 Gbit/s: the slow networks compression is for; set it to your link's rate), with the
latency and CPU costs measured on this machine. Each tensor takes the route that adds the least
predicted time to the step: wire time (Horovod fuses allgathers and allreduces, so only
two-phase's bucketed alltoall pays negotiation and latency, each tensor its share of its
bucket's) plus the CPU the compressed path spends on it (per encode and decode call, and per
element). Two-phase also starts a round of its own after the backward pass,
paid once a step: the plan is the cheaper of the best plan with two-phase and the best without
it. On a tie, the earlier of allgather, twophase, dense. What that gives (tests/test_route.py
pins each case):

* at p = 2 allgather and two-phase send about the same bytes and two-phase pays more CPU and a
  round more, so allgather;
* from p = 3 on, two-phase for tensors whose saved bytes, about (p-2) payloads, outweigh its
  extra CPU (2p + 1 more encode and decode calls) and their share of its alltoall, as long as
  all of them together outweigh the second round: the large tensors of ResNet-18 or of an LSTM
  language model on 1 Gbit/s, none of LeNet-5's; allgather for the rest;
* dense where compressing cannot win: a payload as large as the dense gradient (TopK at a ratio
  near 1/2 or above), a tensor whose dense bytes cross the link in less time than the compressed
  path's CPU takes (a few thousand elements on 1 Gbit/s; on a fast link, every tensor: set
  ``link_gbit`` and auto sends what compressing cannot speed up as Horovod would), or
  allgather-only sizes at very large p.

Every rank computes the same routes from the same inputs (options, names, shapes, dtypes,
world size), which the agreement check (agreement.py) guarantees agree.
"""
import torch

from ..compressor import Compressor
from . import cost
from .fusion import BUCKET_BYTES
from .twophase import fits

ROUTES = ("allgather", "twophase", "dense")


def costs(compressor: Compressor, shape: torch.Size, itemsize: int, ranks: int) -> dict[str, cost.Cost]:
    """The predicted cost of each route available to a gradient of ``shape`` and element size
    ``itemsize`` (bytes) on ``ranks`` ranks."""
    n = shape.numel()
    payload = compressor.expected_bytes(n, shape)
    predicted = {"allgather": cost.allgather(payload, ranks) + cost.compute(n, 2),
                 "dense": cost.dense(n * itemsize, ranks)}
    if fits(n, ranks):
        region = compressor.expected_bytes(-(-n // ranks), shape)
        share = min(1.0, n * itemsize / BUCKET_BYTES)
        predicted["twophase"] = (cost.twophase(payload, region, ranks, share)
                                 + cost.compute(n, 2 * ranks + 3))
    return predicted


#: a tensor the plan routes: its name, shape and element size in bytes
Tensor = tuple[str, torch.Size, int]


def plan(compressor: Compressor, tensors: list[Tensor], ranks: int) -> dict[str, str]:
    """The route of each of ``tensors`` (the compressible gradients of one optimizer) on
    ``ranks`` ranks: forced routes as forced, ``auto`` as the module docstring says."""
    forced = compressor.communication
    if forced == "auto" and ranks == 1:
        return {name: "allgather" for name, _, _ in tensors}
    if forced != "auto":  # a tensor two-phase cannot split stays on the allgather
        return {name: "allgather" if forced == "twophase" and not fits(shape.numel(), ranks) else forced
                for name, shape, _ in tensors}
    link = cost.Link(compressor.link_gbit)
    predicted = {name: costs(compressor, shape, itemsize, ranks) for name, shape, itemsize in tensors}
    best: tuple[float, dict[str, str]] | None = None
    for allowed in (ROUTES, ("allgather", "dense")):
        routes, total = {}, cost.Cost(0.0)
        for name, options in predicted.items():
            way = min((r for r in options if r in allowed),
                      key=lambda r: (link.marginal_seconds(options[r]), ROUTES.index(r)))
            routes[name], total = way, total + options[way]
        seconds = link.seconds(total)
        if best is None or seconds < best[0]:
            best = (seconds, routes)
    return best[1]


def choose(compressor: Compressor, grad: torch.Tensor, ranks: int) -> str:
    """The route of ``grad`` alone on ``ranks`` ranks (a gradient its optimizer's plan does not
    hold: its own step's second round is charged to it)."""
    return plan(compressor, [("", grad.shape, grad.element_size())], ranks)[""]
