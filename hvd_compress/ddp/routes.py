"""The routes of one DDP bucket over torch.distributed, each a generator of rounds.

A route's generator encodes its tensors and starts its first collective, then yields; each
time it is resumed it waits for the collective it started, does the codec's work on the result
(communication/codec.py, shared with the Horovod routes) and starts the next one, until the
last result is decoded into the tensors' gradients (views of the bucket's buffer). Every rank
resumes the same routes in the same order (__init__.py, ``_Bucket``), so they issue their
collectives in one order, which gloo and NCCL require.

Variable-length payloads: a rank's payloads of one round travel as one buffer of frames back to
back (framing.py: each frame self-delimiting), padded to the longest rank's buffer, which a
gather of the buffers' lengths tells first (``_allgathered``): two collectives, the first of 8
bytes a rank. Gloo's ``all_gather_into_tensor`` needs equal sizes; ``all_to_all_single`` takes
uneven splits, so two-phase's alltoall sends no padding.
"""
from typing import Generator, Iterator

import torch
import torch.distributed as dist

from ..communication import framing
from ..communication.codec import (PowerStep, chunk_bounds, compressed, gathered_aggregate,
                                   reduced_region, regions_aggregate)
from ..compressor import Compressor

#: a tensor of a bucket: its parameter's name, its gradient (a view of the bucket's buffer),
#: and whether this rank computed none this step (codec.py: absent)
Entry = tuple[str, torch.Tensor, bool]
Rounds = Iterator[None]
#: every rank's equal-sized tensor into one (torch 2.13 renamed all_gather_into_tensor)
all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class Group:
    """What the routes need of the hook's state: the compressor and the process group."""

    def __init__(self, compressor: Compressor, group: dist.ProcessGroup | None) -> None:
        self.compressor, self.group = compressor, group
        self.ranks, self.rank = dist.get_world_size(group), dist.get_rank(group)

    def wait(self, work: dist.Work) -> None:
        with self.compressor.accounting.timed("wait"):
            work.wait()


def _put(grad: torch.Tensor, result: torch.Tensor) -> None:
    """Writes an aggregate into its gradient's place in the bucket (a no-op where the codec
    decoded it there already: codec.output_for)."""
    if result.data_ptr() != grad.data_ptr():
        grad.copy_(result.view(grad.shape))


def _unframe(buffer: torch.Tensor, spans: list[tuple[int, int]], tags: list[int], names: list[str],
             what: str) -> list[tuple[list[torch.Tensor], bool]]:
    """Rank r's frames, one per tensor in order, lie at ``spans[r]`` (start, length) of
    ``buffer``; per tensor, its bodies in rank order and whether every rank's was finite."""
    found = [[(start + offset, length, word) for offset, length, word
              in framing.headers(buffer[start:start + size], len(tags), what)] for start, size in spans]
    return [framing.bodies(buffer, [f[i] for f in found], tag, repr(name))
            for i, (tag, name) in enumerate(zip(tags, names))]


def _allgathered(group: Group, frames: list[torch.Tensor], tags: list[int], names: list[str],
                 what: str) -> Generator[None, None, list[tuple[list[torch.Tensor], bool]]]:
    """Two rounds: every rank's frames (one per tensor) to every rank, padded to the longest
    rank's (module docstring); returns ``_unframe``'s bodies."""
    device, mine = frames[0].device, sum(f.numel() for f in frames)
    lengths = torch.empty(group.ranks, dtype=torch.int64, device=device)
    work = all_gather(lengths, torch.tensor([mine], dtype=torch.int64, device=device),
                      group=group.group, async_op=True)
    yield
    group.wait(work)
    sizes = lengths.tolist()
    width = max(sizes)
    padded = torch.empty(width, dtype=torch.uint8, device=device)
    torch.cat(frames, out=padded[:mine])
    padded[mine:].zero_()
    gathered = torch.empty(group.ranks * width, dtype=torch.uint8, device=device)
    work = all_gather(gathered, padded, group=group.group, async_op=True)
    yield
    group.wait(work)
    return _unframe(gathered, [(r * width, size) for r, size in enumerate(sizes)], tags, names, what)


def _tag(compressor: Compressor, grad: torch.Tensor, *route: str) -> int:
    return framing.tag_of(compressor.spec(), tuple(grad.shape), *route)


def allgather(group: Group, entries: list[Entry], what: str) -> Rounds:
    """Every rank's payload of each tensor to every rank (communication/allgather.py's route)."""
    compressor = group.compressor
    with compressor.accounting.timed("compress"):
        tags, frames = [], []
        for name, grad, absent in entries:
            (body,), finite = compressed(compressor, name, grad, absent)
            tags.append(_tag(compressor, grad))
            frames.append(framing.frame(body, tags[-1], finite))
            compressor.accounting.count(name, grad.numel(), frames[-1].numel())
    received = yield from _allgathered(group, frames, tags, [name for name, _, _ in entries], what)
    with compressor.accounting.timed("decode"):
        for (name, grad, _), (bodies, finite) in zip(entries, received):
            _put(grad, gathered_aggregate(compressor, grad, bodies, finite, True, repr(name)))


def twophase(group: Group, entries: list[Entry], what: str) -> Rounds:
    """Alltoall of chunks, reduce and re-compress, allgather of regions
    (communication/twophase.py's scheme), one alltoall and one allgather for the bucket."""
    compressor, ranks = group.compressor, group.ranks
    device = entries[0][1].device
    bounds = [chunk_bounds(grad.numel(), ranks) for _, grad, _ in entries]
    with compressor.accounting.timed("compress"):
        tags, outgoing = [], [[] for _ in range(ranks)]  # outgoing[j]: the frames for rank j
        for (name, grad, absent), pieces in zip(entries, bounds):
            bodies, finite = compressed(compressor, name, grad, absent, pieces)
            tags.append(_tag(compressor, grad, "twophase"))
            for j, body in enumerate(bodies):
                outgoing[j].append(framing.frame(body, tags[-1], finite))
        splits = [sum(f.numel() for f in frames) for frames in outgoing]
        send = torch.cat([f for frames in outgoing for f in frames])
    matrix = torch.empty(ranks * ranks, dtype=torch.int64, device=device)
    work = all_gather(matrix, torch.tensor(splits, dtype=torch.int64, device=device),
                      group=group.group, async_op=True)
    yield
    group.wait(work)
    incoming = matrix.view(ranks, ranks)[:, group.rank].tolist()
    received = torch.empty(sum(incoming), dtype=torch.uint8, device=device)
    work = dist.all_to_all_single(received, send, incoming, splits, group=group.group, async_op=True)
    yield
    group.wait(work)
    names = [name for name, _, _ in entries]
    with compressor.accounting.timed("decode"):
        starts = [sum(incoming[:r]) for r in range(ranks)]
        chunks = _unframe(received, list(zip(starts, incoming)), tags, names, what)
        regions = []
        for i, ((name, grad, _), (bodies, finite)) in enumerate(zip(entries, chunks)):
            regions.append(reduced_region(compressor, name, grad, bounds[i][group.rank], bodies,
                                          finite, True, tags[i]))
            compressor.accounting.count(name, grad.numel(), sum(f[i].numel() for f in outgoing)
                                        + regions[-1].numel())
    received = yield from _allgathered(group, regions, tags, names, what)
    with compressor.accounting.timed("decode"):
        for i, ((name, grad, _), (bodies, finite)) in enumerate(zip(entries, received)):
            _put(grad, regions_aggregate(compressor, grad, bodies, finite, bounds[i], repr(name)))


def lowrank(group: Group, entries: list[Entry], what: str) -> Rounds:
    """PowerSGD (communication/lowrank.py's rounds): one allreduce of every tensor's P, one of
    every tensor's Q."""
    steps = [PowerStep(group.compressor, grad, name, absent) for name, grad, absent in entries]
    ps = torch.cat([step.p.reshape(-1) for step in steps])
    work = dist.all_reduce(ps, group=group.group, async_op=True)
    yield
    group.wait(work)
    mine = [step.q_of(p.view(step.p.shape)) for step, p in zip(steps, ps.split([s.p.numel() for s in steps]))]
    qs = torch.cat([q.reshape(-1) for q in mine])
    work = dist.all_reduce(qs, group=group.group, async_op=True)
    yield
    group.wait(work)
    qs.div_(group.ranks)
    for (_, grad, _), step, q, like in zip(entries, steps, qs.split([q.numel() for q in mine]), mine):
        _put(grad, step.aggregate(q.view(like.shape)))


def dense(group: Group, entries: list[Entry], what: str) -> Rounds:
    """The uncompressed tensors: one fp32 allreduce, averaged (DDP's own arithmetic)."""
    flat = torch.cat([grad.reshape(-1).to(torch.float32) for _, grad, _ in entries])
    for _, grad, _ in entries:
        group.compressor.accounting.count(None, grad.numel(), grad.numel() * grad.element_size())
    work = dist.all_reduce(flat, group=group.group, async_op=True)
    yield
    group.wait(work)
    flat.div_(group.ranks)
    for (_, grad, _), part in zip(entries, flat.split([g.numel() for _, g, _ in entries])):
        grad.copy_(part.view(grad.shape))


ROUTES = {"allgather": allgather, "twophase": twophase, "lowrank": lowrank, "dense": dense}
