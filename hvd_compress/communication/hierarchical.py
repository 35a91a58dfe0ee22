"""Hierarchical routes: each node's workers reduce among themselves and only one payload per
node and shard crosses the slow link between nodes.

On nodes of L workers joined by a slower inter-node link (N nodes, p = N L ranks), a flat
route sends every worker's compressed payload across the inter-node link on its own. These
routes do what Horovod's hierarchical allreduce does, with compression where it pays (the
split of Bagua's ByteGrad, ZeRO++'s qgZ and CGX):

1. inside the node, a reduce-scatter: local rank j receives shard j (about n/L elements) of its
   node's L gradients. ``hierarchical``: dense fp32, for nodes whose inside link is fast
   (NVLink, shared memory). ``hierarchical_compressed``: each worker sends its shards
   compressed, with its own residual per shard (``NAME[lo:hi]``, as two-phase's chunks), for
   nodes whose inside link or CPU is not (Espresso, EuroSys 2023, picks per tensor between the
   two; ``auto`` measures both);
2. across nodes, the ranks holding shard j on every node (its *cross peers*, topology.py)
   exchange it compressed: each compresses its node's mean of the shard plus its node residual
   (``NAME#node``) and sends the payload to its N-1 cross peers;
3. inside the node, every rank forwards the N payloads of its shard to its node's other
   workers, and every rank decodes the N L payloads, shard by shard, in node order.

Every rank decodes the same payloads in the same order, so every rank ends with the same
bits. A non-finite gradient on any rank reaches, flagged, its node's shard owners in step 1
(dense: their encode of the mean finds it), every cross peer in step 2 and every rank in step
3: the aggregate is NaN everywhere, as on the flat routes (codec.py), and no residual takes
the poison. A worker residual left from a flat route is added to the next gradient the dense
variant sends, once; the planner moves ``NAME#node`` back into the worker residual when a
tensor leaves these routes (planner.py), so a route switch loses no residual and applies none
twice. Node residuals are in units of the node's mean gradient: the worker's, over L.

Cost per rank, with b(m) the payload of m elements and n the tensor's elements: across nodes
(N-1) b(n/L), so a node's uplink carries about (N-1) b(n), one payload per remote node, not
one per remote worker as a flat allgather's ring does ((p-1) b(n)). Inside the node: step 1
sends (L-1)/L 4n bytes dense (or about (L-1)/L b(n) compressed), step 3 (L-1) N b(n/L). CPU:
one encode of n/L (plus L shard encodes of n/L and L decodes when compressed inside), and N L
decodes of n/L, against one encode of n and p decodes of n by allgather. Collectives: step 1
rides in the two-phase alltoall buckets (fusion.py); steps 2 and 3 are one alltoall each for
all of a step's hierarchical tensors (``_Batch``): their rounds are paid once a step, not per
tensor. Measured on the simulated cluster of nodes: docs/benchmarks.md, "Nodes".

Methods that cannot take them (``Compressor.ROUTES``): PowerSGD (its factors span the whole
matrix; a shard of rows is no low-rank product), DGC (momentum correction and gradient clipping
are per worker), SignSGD and Signum (a majority vote over workers would become one over nodes).
"""
import threading

import torch

from ..compressor import Compressor
from ..payload import PayloadError
from . import framing
from .base import Exchange, Wait, in_two_rounds
from .codec import chunk_bounds, compressed, decode_sum, output_for
from .fusion import Round
from .topology import HIERARCHICAL

SHARD_KEY = "#node"
ROUTES = HIERARCHICAL  # each route here, and whether it compresses inside the node too


class _Batch:
    """One step's hierarchical tensors of one optimizer: steps 2 and 3 as one alltoall each."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.members: dict[str, "_Reduction"] = {}
        self.cross: Round | None = None
        self.forward: Round | None = None
        self.queued = False
        self.lock = threading.Lock()

    def send_cross(self) -> None:
        """Step 2 for every member: by now (the first wait of a step) every rank holds the same
        members, ``synchronize()`` having submitted every gradient before waiting on any."""
        names = sorted(self.members)
        self.cross = Round("#node.cross", names, self.exchange)
        for name in names:
            self.cross.frames[name] = self.members[name].cross_frames()
        self.cross.send()

    def send_forward(self) -> None:
        """Step 3 for every member, once (the first member waited on sends it)."""
        with self.lock:
            if self.forward is None:
                names = sorted(self.members)
                forward = Round("#node.forward", names, self.exchange)
                for name in names:
                    forward.frames[name] = self.members[name].forward_frames(self.cross.received(name))
                forward.send()
                self.forward = forward


def _batch_of(exchange: Exchange) -> _Batch:
    with exchange.lock:
        if exchange.batch is None or exchange.batch.queued:
            exchange.batch = _Batch(exchange)
        return exchange.batch


class _Reduction:
    """One tensor's hierarchical allreduce, from step 1 in flight to the aggregate."""

    def __init__(self, compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
                 absent: bool, inside: bool) -> None:
        self.compressor, self.grad, self.name, self.exchange = compressor, grad, name, exchange
        self.inside = inside  # compressed inside the node too
        self.nodes = nodes = exchange.nodes
        self.ranks = exchange.process_set.size()
        self.bounds = chunk_bounds(grad.numel(), nodes.size)
        route = "hierarchical_compressed" if inside else "hierarchical"
        self.tag = framing.tag_of(compressor.spec(), tuple(grad.shape), route)
        self.batch = _batch_of(exchange)
        self.batch.members[name] = self
        with compressor.accounting.timed("compress"):
            bodies, finite = (compressed(compressor, name, grad, absent, self.bounds) if inside
                              else self._dense_shards(absent))
            frames = self._to(nodes.local, [framing.frame(body, self.tag, finite) for body in bodies])
        self.sent = self._sent(frames, nodes.local)
        self.phase1 = exchange.buckets.scatter(name, frames, self.tag)

    def _dense_shards(self, absent: bool) -> tuple[list[torch.Tensor], bool]:
        """The gradient's shards, fp32 bytes (empty when absent), with a worker residual left
        from a flat route added once."""
        if absent:
            return [self._empty()] * len(self.bounds), True
        flat = self.grad.detach().reshape(-1).float()
        leftover = self.compressor.memory.pop(self.name)
        if leftover is not None and self.compressor.memory.keeps and leftover.numel() == flat.numel():
            flat = flat + leftover.to(flat.device)
        return [flat[lo:hi].contiguous().view(torch.uint8) for lo, hi in self.bounds], True

    def _empty(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8, device=self.grad.device)

    def _to(self, peers: tuple[int, ...], frames: list[torch.Tensor]) -> list[torch.Tensor]:
        """An alltoall's frames: ``frames[i]`` to ``peers[i]``, a header-only frame to every
        other rank (an alltoall sends every rank something)."""
        out = [framing.frame(self._empty(), self.tag)] * self.ranks
        for rank, frame in zip(peers, frames):
            out[rank] = frame
        return out

    def _sent(self, frames: list[torch.Tensor], peers: tuple[int, ...]) -> int:
        mine = self.exchange.process_set.rank()
        return sum(frames[r].numel() for r in peers if r != mine)

    def start_phase2(self) -> None:
        """Queues this step's batch to send step 2 once every pending reduction started."""
        with self.exchange.lock:
            if not self.batch.queued:
                self.batch.queued = True
                self.exchange.after_round.append(self.batch.send_cross)

    def cross_frames(self) -> tuple[list[torch.Tensor], int]:
        """Step 2's frames: the node's mean of this rank's shard, plus its node residual,
        compressed, to every cross peer (empty when no rank of the node had a gradient)."""
        with self.compressor.accounting.timed("wait"):
            bodies, finite = self.phase1.received()
        with self.compressor.accounting.timed("compress"):
            lo, hi = self.bounds[self.nodes.local_rank]
            mean = torch.zeros(hi - lo, dtype=torch.float32, device=self.grad.device)
            mine = [bodies[rank] for rank in self.nodes.local]
            if self.inside:
                present = decode_sum(self.compressor, mine, mean, self.grad.shape, what=repr(self.name)) if finite else 0
            else:
                present = sum(mean.add_(_floats(body, hi - lo, self.name)) is not None
                              for body in mine if body.numel())
            mean.div_(self.nodes.size)
            body = self._empty()
            if finite and present:
                memory, key = self.compressor.memory, self.name + SHARD_KEY
                acc = memory.buffer(key, mean)
                encoded = self.compressor.fold_encode(acc, mean, self.grad.shape, memory.keeps, key)
                if encoded is None:  # non-finite: the residual keeps nothing of it
                    acc.zero_()
                    finite = False
                else:
                    body = encoded
            frame = framing.frame(body, self.tag, finite)
            frames = self._to(self.nodes.cross, [frame] * self.nodes.count)
        self.sent += self._sent(frames, self.nodes.cross)
        return frames, self.tag

    def forward_frames(self, received: tuple[list[torch.Tensor], bool]) -> tuple[list[torch.Tensor], int]:
        """Step 3's frames: the shard's N payloads, each framed (flagged when any was not
        finite), in one frame to every worker of the node."""
        bodies, finite = received
        inner = torch.cat([framing.frame(bodies[rank], self.tag, finite) for rank in self.nodes.cross])
        frames = self._to(self.nodes.local, [framing.frame(inner, self.tag)] * self.nodes.size)
        self.sent += self._sent(frames, self.nodes.local)
        return frames, self.tag

    def result(self) -> torch.Tensor:
        with self.compressor.accounting.timed("wait"):
            self.batch.send_forward()
            bodies, _ = self.batch.forward.received(self.name)
        self.compressor.accounting.count(self.name, self.grad.numel(), self.sent)
        with self.compressor.accounting.timed("decode"):
            out = output_for(self.grad)
            for (lo, hi), rank in zip(self.bounds, self.nodes.local):
                payloads, finite = framing.unframe(bodies[rank], self.tag, self.nodes.count, repr(self.name))
                if not finite:
                    return out.fill_(float("nan")).view(self.grad.shape).to(self.grad.dtype)
                decode_sum(self.compressor, payloads, out[lo:hi], self.grad.shape, what=repr(self.name))
            # the mean of node means is the mean over workers; their sum, L times it
            out.mul_(1 / self.nodes.count if self.exchange.average else self.nodes.size)
            self.compressor.aggregate(out)
            return out.view(self.grad.shape).to(self.grad.dtype)


def _floats(body: torch.Tensor, numel: int, name: str) -> torch.Tensor:
    """A dense shard's bytes as its fp32 elements; a PayloadError if they cannot be that."""
    if body.numel() != 4 * numel:
        raise PayloadError(f"hvd_compress: a node peer's shard of {name!r} has {body.numel()} "
                           f"bytes, not {4 * numel}")
    return body.view(torch.float32)


def starter(route: str):
    """The start function of ``route`` (one of ``ROUTES``), as the hook's STARTS hold them."""
    inside = ROUTES[route]

    def start(compressor: Compressor, grad: torch.Tensor, name: str, exchange: Exchange,
              absent: bool = False) -> Wait:
        """Starts step 1 for ``grad`` (nothing of it when ``absent``: see codec.py); the handle
        finishes the allreduce and yields the aggregate in ``grad``'s shape and dtype. The
        exchange must know its nodes (``exchange.nodes``) and ``grad`` give each worker of a
        node a shard (``codec.fits(n, nodes.size)``)."""
        return in_two_rounds(_Reduction(compressor, grad, name, exchange, absent, inside), exchange, name)

    return start
