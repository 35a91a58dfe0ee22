"""Which way one compressed gradient travels: ``communication="auto"`` and the forced choices.

The routes:

* ``allgather`` (allgather.py): every rank receives every rank's payload. One round of messages
  (fused by Horovod with the step's other allgathers); each worker receives (p-1) payloads.
* ``twophase`` (twophase.py): alltoall of chunks, reduce and re-compress, allgather of regions.
  Each worker sends about 2 payloads whatever p is, but pays a second encode and a share of
  its bucket's alltoall (fusion.py: Horovod does not fuse alltoalls, we bucket them).
* ``dense``: Horovod's own allreduce of the uncompressed gradient.

``auto`` (the default) takes, per tensor, the route that adds the least predicted time to the
step under the cost model (cost.py: Horovod fuses allgathers and allreduces, so only
two-phase's bucketed alltoall pays negotiation and latency, each tensor its share of its
bucket's), on a link of the compressor's ``link_gbit`` (default 1 Gbit/s: the slow networks
compression is for; set it to your link's rate) with the latency measured on the simulated cluster; on a tie, the earlier of
allgather, twophase, dense. What that gives (tests/test_route.py pins each case):

* at p = 2 allgather and two-phase send about the same bytes and two-phase pays its share of
  an alltoall, so allgather;
* from p = 3 on, two-phase for every tensor whose saved bytes, about (p-2) payloads, outweigh
  its share of its bucket's alltoall; allgather below;
* dense where compressing saves nothing: a payload as large as the dense gradient (TopK at a
  ratio near 1/2 or above), or allgather-only sizes at very large p.

Every rank computes the same route from the same inputs (options, shape, dtype, world size),
which the agreement check (agreement.py) guarantees agree. Compute is not part of the choice:
the compressed routes run the same kernels on about the same number of elements.
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
    predicted = {"allgather": cost.allgather(payload, ranks),
                 "dense": cost.dense(n * itemsize, ranks)}
    if fits(n, ranks):
        region = compressor.expected_bytes(-(-n // ranks), shape)
        share = min(1.0, n * itemsize / BUCKET_BYTES)
        predicted["twophase"] = cost.twophase(payload, region, ranks, share)
    return predicted


def choose(compressor: Compressor, grad: torch.Tensor, ranks: int) -> str:
    """The route ``grad`` takes on ``ranks`` ranks."""
    forced = compressor.communication
    if forced == "twophase" and not fits(grad.numel(), ranks):
        return "allgather"
    if forced != "auto":
        return forced
    if ranks == 1:
        return "allgather"
    link = cost.Link(compressor.link_gbit)
    predicted = costs(compressor, grad.shape, grad.element_size(), ranks)
    return min(predicted, key=lambda r: (link.marginal_seconds(predicted[r]), ROUTES.index(r)))
