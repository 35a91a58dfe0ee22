"""``decode_add_all``: all of a tensor's payloads in one kernel call adds, bit for bit, what
``decode_add`` of each payload in rank order adds (the per-payload decoders are checked against
the numpy references in the kernel tests), whether the payloads are the bodies of one gathered
buffer (decoded where they lie) or separate tensors (joined first)."""
import pytest
import torch

import hvd_compress as hc
from hvd_compress.communication import framing
from hvd_compress.communication.base import decode_sum
from hvd_compress.kernels.threads import PARALLEL_MIN

import catalogue
from kernel_builds import build  # noqa: F401  (fixture)

SPECS = catalogue.fused_decoders()
SHAPES = [torch.Size([1]), torch.Size([3, 5, 7]), torch.Size([129, 1001]),  # odd sizes, groups
          torch.Size([PARALLEL_MIN + 3])]  # blocks of OneBit's fused decode, partial last one


def payloads(compressor: hc.Compressor, shape: torch.Size, ranks: int) -> list[torch.Tensor]:
    """Each rank's payload of its own random gradient."""
    out = []
    for rank in range(ranks):
        grad = torch.randn(shape.numel(), generator=torch.Generator().manual_seed(rank))
        out.append(compressor.encode(grad.clone(), grad, shape))
    return out


def one_by_one(compressor: hc.Compressor, parts: list[torch.Tensor], shape: torch.Size) -> torch.Tensor:
    out = torch.zeros(shape.numel())
    for part in parts:
        compressor.decode_add(part, out, shape)
    return out


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_decode_add_all_matches_decode_add_in_order(spec, shape, build):
    compressor = hc.from_spec(spec)
    ranks = 4
    parts = payloads(compressor, shape, ranks)
    want = one_by_one(compressor, parts, shape)
    gathered = torch.cat([framing.frame(p, 7) for p in parts])
    bodies, _ = framing.unframe(gathered, 7, ranks, "t")
    for given in (bodies, parts):  # views of one buffer; separate tensors
        got = torch.zeros(shape.numel())
        compressor.decode_add_all(given, got, shape)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_decode_sum_skips_empty_bodies_and_keeps_rank_order():
    """Ranks without a gradient send empty bodies; the others are summed in rank order (TopK's
    payloads share indices, so the order of additions shows in the last bits)."""
    compressor, shape = hc.TopK(0.5), torch.Size([1000])
    parts = payloads(compressor, shape, 3)
    empty = torch.empty(0, dtype=torch.uint8)
    gathered = torch.cat([framing.frame(p, 7) for p in [empty, parts[0], empty, parts[1], parts[2]]])
    bodies, _ = framing.unframe(gathered, 7, 5, "t")
    got = torch.zeros(shape.numel())
    assert decode_sum(compressor, bodies, got, shape) == 3
    assert torch.equal(got.view(torch.int32), one_by_one(compressor, parts, shape).view(torch.int32))
