"""Which way one compressed gradient travels: ``communication="auto"`` and the forced choices.

The routes:

* ``allgather`` (allgather.py): every rank receives every rank's payload. One round of messages
  (fused by Horovod with the step's other allgathers); each worker receives (p-1) payloads.
* ``twophase`` (twophase.py): alltoall of chunks, reduce and re-compress, allgather of regions.
  Each worker sends about 2 payloads whatever p is, but pays a second encode, 2p + 3 encode and
  decode calls, a share of its bucket's alltoall (fusion.py: Horovod does not fuse alltoalls,
  we bucket them) and a round after the backward pass.
* ``hierarchical`` and ``hierarchical_compressed`` (hierarchical.py), on nodes of several
  workers (topology.py): reduced inside the node (dense, or compressed too), compressed across
  nodes, each worker for its shard of the tensor. A node's uplink carries one compressed
  payload per remote node instead of one per remote worker.
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
from .codec import fits
from .cost import BUCKET_BYTES
from .topology import HIERARCHICAL, Nodes

ROUTES = ("allgather", "twophase", "hierarchical", "hierarchical_compressed", "dense")
#: the route sets a plan may draw from: with two-phase, without it, compressing every tensor,
#: and on nodes each hierarchical route, alone or beside allgather
ROUTE_SETS = (ROUTES, ("allgather", "dense"), ("allgather", "twophase"),
              *((way, "dense") for way in HIERARCHICAL),
              *(("allgather", way, "dense") for way in HIERARCHICAL))


def costs(compressor: Compressor, shape: torch.Size, itemsize: int, ranks: int,
          cpu: cost.Cpu = cost.Cpu(), nodes: Nodes | None = None) -> dict[str, cost.Cost]:
    """The predicted cost of each route available to a gradient of ``shape`` and element size
    ``itemsize`` (bytes) on ``ranks`` ranks (on ``nodes``, when they are known), the compressed
    path taking ``cpu``."""
    n = shape.numel()
    payload = compressor.expected_bytes(n, shape)
    predicted = {"allgather": cost.allgather(payload, ranks) + cost.compute(n, 2, cpu),
                 "dense": cost.dense(n * itemsize, ranks)}
    share = min(1.0, n * itemsize / BUCKET_BYTES)
    if fits(n, ranks):
        region = compressor.expected_bytes(-(-n // ranks), shape)
        predicted["twophase"] = (cost.twophase(payload, region, ranks, share)
                                 + cost.compute(n, 2 * ranks + 3, cpu))
    if nodes is not None and fits(n, nodes.size):
        shard = compressor.expected_bytes(-(-n // nodes.size), shape)
        for way, inside in HIERARCHICAL.items():
            if way in compressor.ROUTES:
                calls = 1 + nodes.count * nodes.size + (2 * nodes.size if inside else 0)
                predicted[way] = (cost.hierarchical(n, shard, nodes.size, nodes.count, share, inside)
                                  + cost.compute(n, calls, cpu))
    return predicted


#: a tensor the plan routes: its name, shape and element size in bytes
Tensor = tuple[str, torch.Size, int]


def link_of(compressor: Compressor, nodes: Nodes | None = None) -> cost.Link:
    """The link a plan assumes when none was measured: the compressor's ``link_gbit``, or
    ``cost.DEFAULT_GBIT``, with the fitted latencies; on ``nodes`` that is the inter-node link,
    which a node's workers share, and ``cost.INTRA_GBIT`` inside the node."""
    gbit = compressor.link_gbit or cost.DEFAULT_GBIT
    if nodes is None:
        return cost.Link(gbit)
    return cost.Link(gbit, intra_gbit=cost.INTRA_GBIT, cross_gbit=gbit / nodes.size)


def candidates(compressor: Compressor, tensors: list[Tensor], ranks: int, link: cost.Link,
               cpu: cost.Cpu = cost.Cpu(), nodes: Nodes | None = None) -> list[tuple[float, dict[str, str]]]:
    """(predicted seconds, routes) of the best plan from each of ``ROUTE_SETS`` and of sending
    everything dense, fastest first, without repeats."""
    predicted = {name: costs(compressor, shape, itemsize, ranks, cpu, nodes)
                 for name, shape, itemsize in tensors}
    plans = []
    for allowed in (*ROUTE_SETS, ("dense",)):
        # Every plan pays the step's dense allreduce: a model's small tensors (biases, norms),
        # which are never compressed, make one anyway.
        routes, total = {}, cost.dense(0, ranks)
        for name, options in predicted.items():
            way = min((r for r in options if r in allowed),
                      key=lambda r: (link.marginal_seconds(options[r]), ROUTES.index(r)))
            routes[name], total = way, total + options[way]
        if routes not in [r for _, r in plans]:
            plans.append((link.seconds(total), routes))
    return sorted(plans, key=lambda plan: plan[0])


def plan(compressor: Compressor, tensors: list[Tensor], ranks: int, link: cost.Link | None = None,
         cpu: cost.Cpu = cost.Cpu(), nodes: Nodes | None = None) -> dict[str, str]:
    """The route of each of ``tensors`` (the compressible gradients of one optimizer) on
    ``ranks`` ranks (on ``nodes``, when known): forced routes as forced; for ``auto`` the
    model's best plan on ``link`` (default: ``link_of``), as the module docstring says."""
    forced = compressor.communication
    if forced == "auto" and ranks == 1:
        return {name: "allgather" for name, _, _ in tensors}
    if forced != "auto":
        return {name: forced if _forceable(forced, shape.numel(), ranks, nodes) else "allgather"
                for name, shape, _ in tensors}
    best = candidates(compressor, tensors, ranks, link or link_of(compressor, nodes), cpu, nodes)[0]
    return best[1]


def _forceable(forced: str, n: int, ranks: int, nodes: Nodes | None) -> bool:
    """Whether a tensor of ``n`` elements can take a forced route; the allgather where not: a
    tensor two-phase cannot split, or the hierarchical route where the world is not whole
    nodes of several workers alike (topology.py) or the tensor too small to shard."""
    if forced == "twophase":
        return fits(n, ranks)
    if forced in HIERARCHICAL:
        return nodes is not None and fits(n, nodes.size)
    return True


def choose(compressor: Compressor, grad: torch.Tensor, ranks: int) -> str:
    """The route of ``grad`` alone on ``ranks`` ranks (a gradient its optimizer's plan does not
    hold: its own step's second round is charged to it)."""
    return plan(compressor, [("", grad.shape, grad.element_size())], ranks)[""]
