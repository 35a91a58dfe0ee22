"""Which ranks share a node: what the hierarchical route (hierarchical.py) needs to know.

Horovod tells each rank its own ``local_rank``, ``local_size`` and ``cross_rank`` (from the
launcher: ``horovodrun -H host1:4,host2:4`` gives 2 nodes of 4), but not the other ranks'. One
allgather of (the first rank of my node, my local rank, my node's size) per Horovod world gives
every rank the whole layout. The ranks of a node are then its local ranks 0..L-1 in order, and
rank r's *cross peers* are the ranks with r's local rank on every node, in node order.

The hierarchical route needs every node to hold the same number of workers L >= 2, at least two
nodes, and the optimizer's process set to be Horovod's global one (a process set's ranks are not
whole nodes in general). Any other layout gets ``None``: the flat routes only.

Cost: one 24-byte allgather per Horovod world, blocking, at the optimizer's first gradient; none
at all on a single node (Horovod's own local_size == size says so without asking).
"""
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import horovod.torch as hvd

#: the routes that need this layout (hierarchical.py), and whether each compresses inside the
#: node too; here, where the planning (route.py, Horovod-free) can read them
HIERARCHICAL = {"hierarchical": False, "hierarchical_compressed": True}


@dataclass(frozen=True)
class Nodes:
    """This rank's place among nodes of ``size`` workers each (process-set ranks)."""

    size: int  # workers per node, L
    count: int  # nodes, N
    local: tuple[int, ...]  # the ranks of this rank's node, by local rank
    cross: tuple[int, ...]  # the ranks with this rank's local rank, by node
    local_rank: int
    node: int  # this rank's node, 0..N-1


_layouts: dict[tuple[int, int], Nodes | None] = {}


def of(process_set: "hvd.ProcessSet", world: int) -> Nodes | None:
    """This rank's ``Nodes`` in Horovod world ``world``, or None where the hierarchical route
    cannot run (module docstring). Every rank of ``process_set`` must call it at the same point
    of its first step (the hook does, in the optimizer's agreement)."""
    key = (world, id(process_set))
    if key not in _layouts:
        _layouts[key] = _layout(process_set, world)
    return _layouts[key]


def _layout(process_set: "hvd.ProcessSet", world: int) -> Nodes | None:
    import horovod.torch as hvd  # here: route.py imports this module, and DDP users need no Horovod

    size = hvd.size()
    # one node: every rank knows it alike (a rank with local_size 1 might not be alone in that)
    if process_set.size() != size or hvd.local_size() == size:
        return None
    mine = torch.tensor([[hvd.rank() - hvd.local_rank(), hvd.local_rank(), hvd.local_size()]])
    everyone = hvd.allgather(mine, name=f"hvd_compress.topology.{world}").tolist()
    return layout(everyone, hvd.rank())


def layout(everyone: list[list[int]], rank: int) -> Nodes | None:
    """``Nodes`` of ``rank`` from every rank's (first rank of its node, local rank, local size),
    in rank order; None unless nodes are alike and whole (module docstring)."""
    nodes: dict[int, list[int]] = {}
    for r, (first, local_rank, _) in enumerate(everyone):
        nodes.setdefault(first, []).append(r)
    sizes = {len(ranks) for ranks in nodes.values()} | {s for _, _, s in everyone}
    if len(nodes) < 2 or len(sizes) != 1 or sizes == {1}:
        return None
    ordered = [sorted(ranks, key=lambda r: everyone[r][1]) for _, ranks in sorted(nodes.items())]
    if any([everyone[r][1] for r in ranks] != list(range(len(ranks))) for ranks in ordered):
        return None
    node = next(i for i, ranks in enumerate(ordered) if rank in ranks)
    local_rank = everyone[rank][1]
    return Nodes(size=len(ordered[0]), count=len(ordered), local=tuple(ordered[node]),
                 cross=tuple(ranks[local_rank] for ranks in ordered), local_rank=local_rank,
                 node=node)
