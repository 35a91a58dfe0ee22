"""Fused phase-1 messages: a backward pass's two-phase alltoalls in a few buckets, not one
collective per tensor.

Horovod 0.28.1 fuses the allreduces and allgathers of a cycle into one collective, but runs each
alltoall on its own. Two-phase (twophase.py) starts one alltoall per tensor, and each costs
p-1 message rounds plus Horovod's negotiation: on a ResNet-18 (about 60 tensors) at large p
that is thousands of message start-ups a step. Here a tensor's phase-1 frames wait in a bucket
and the bucket leaves as one alltoall, carrying, for each destination rank, its members' frames
back to back (each self-delimiting, framing.py).

The buckets are DDP's: consecutive parameters in reverse registration order (the order the
backward pass produces gradients), each bucket at most ``BUCKET_BYTES`` of dense gradient (DDP's
default, 25 MB) and at least one parameter. ``plan`` fixes them from what every rank has alike
(the optimizer's parameters, their shapes and dtypes, the compressor's route for each), so every
rank builds the same buckets and names them the same. A bucket leaves as soon as its last
member's frames are in, without waiting for the rest of the backward pass: the first bucket of
a step leaves while most gradients are still being computed.

A member may come late (a gradient Horovod's ``synchronize()`` submits, zero-filled, because
this rank's backward pass produced none) or never (a gradient that turned out sparse, so went
dense, though its parameter looked compressible). Either way, the first time a rank waits on a
bucket it sends every bucket still open, with the members it has: ``synchronize()`` submits
every parameter before it waits on any, so by then every rank holds the same members.

Cost: one copy of the frames (compressed bytes, not dense) into the bucket's send buffer, and
one alltoall per bucket instead of per tensor; what the cost model charges (cost.twophase).
Tensors the plan does not hold (a forced ``communication="twophase"`` on a tensor the plan
routes elsewhere) travel alone, as before.
"""
import threading
from typing import Callable

import horovod.torch as hvd
import torch

from . import framing
from .cost import BUCKET_BYTES

#: the routes whose first round is an alltoall these buckets carry
ALLTOALL_ROUTES = ("twophase", "hierarchical", "hierarchical_compressed")


def plan(parameters: list[tuple[str, torch.Tensor]], two_phase: Callable[[str], bool],
         cap: int = BUCKET_BYTES) -> list[list[str]]:
    """Buckets of parameter names: ``parameters`` in registration order, those whose name
    ``two_phase`` says go by two-phase, grouped in reverse order up to ``cap`` dense bytes each."""
    buckets, size = [], cap
    for name, p in reversed(parameters):
        if not two_phase(name):
            continue
        if size + p.numel() * p.element_size() > cap and (not buckets or buckets[-1]):
            buckets.append([])
            size = 0
        buckets[-1].append(name)
        size += p.numel() * p.element_size()
    return buckets


class Round:
    """One alltoall carrying several tensors' frames in one step (a bucket here; a step's
    hierarchical tensors in hierarchical.py): the members' frames, then the received buffer."""

    def __init__(self, label: str, members: list[str], exchange) -> None:
        self.label, self.members, self.exchange = label, members, exchange
        self.frames: dict[str, tuple[list[torch.Tensor], int]] = {}
        self.present: list[str] = []  # the members sent
        self.handle = None
        self.parsed: dict[str, tuple[list[torch.Tensor], bool]] | None = None

    def full(self) -> bool:
        return len(self.frames) == len(self.members)

    def send(self) -> None:
        present = self.present = [m for m in self.members if m in self.frames]
        ranks = self.exchange.process_set.size()
        parts = [self.frames[m][0][j] for j in range(ranks) for m in present]
        splits = [sum(self.frames[m][0][j].numel() for m in present) for j in range(ranks)]
        self.handle = hvd.alltoall_async(
            torch.cat(parts), splits=torch.tensor(splits, dtype=torch.int32),
            name=self.exchange.name(self.label, ".scatter"), process_set=self.exchange.process_set)

    def received(self, member: str) -> tuple[list[torch.Tensor], bool]:
        """``member``'s bodies from every rank, in rank order, and whether all were finite."""
        if self.parsed is None:
            buffer, _ = hvd.synchronize(self.handle)
            ranks = self.exchange.process_set.size()
            found = framing.headers(buffer, ranks * len(self.present), self.label)
            self.parsed = {
                m: framing.bodies(buffer, found[i::len(self.present)], self.frames[m][1], repr(m))
                for i, m in enumerate(self.present)}
        return self.parsed[member]


class Delivery:
    """What a member gets back: ``received()`` waits for its bucket's alltoall, sending every
    open bucket first if this one has not left yet."""

    def __init__(self, buckets: "Buckets", round_: Round, member: str) -> None:
        self._buckets, self._round, self._member = buckets, round_, member

    def received(self) -> tuple[list[torch.Tensor], bool]:
        if self._round.handle is None:
            self._buckets.flush()
        return self._round.received(self._member)


class Buckets:
    """One optimizer's buckets (``plan``) and their open rounds."""

    def __init__(self, buckets: list[list[str]], exchange) -> None:
        self.exchange = exchange
        self.of = {name: (i, members) for i, members in enumerate(buckets) for name in members}
        self.open: dict[int, Round] = {}
        self.lock = threading.Lock()

    def scatter(self, name: str, frames: list[torch.Tensor], tag: int) -> Delivery:
        """Hands ``name``'s phase-1 frames (one per destination rank) to its bucket, which
        leaves when it is full; a name outside the plan leaves at once, alone."""
        with self.lock:
            if name not in self.of:
                round_ = Round(name, [name], self.exchange)
                round_.frames[name] = (frames, tag)
                round_.send()
                return Delivery(self, round_, name)
            index, members = self.of[name]
            round_ = self.open.setdefault(index, Round(f"#bucket{index}", members, self.exchange))
            round_.frames[name] = (frames, tag)
            if round_.full():
                del self.open[index]
                round_.send()
            return Delivery(self, round_, name)

    def flush(self) -> None:
        """Sends every open bucket, in plan order, with the members it has."""
        with self.lock:
            for index in sorted(self.open):
                self.open.pop(index).send()
