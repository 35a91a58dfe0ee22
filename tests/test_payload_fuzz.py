"""Damaged payloads: every method's decoder, given a payload another rank could have sent damaged
(a bug, a flipped bit), either raises PayloadError or decodes without touching memory outside
``out``; through ``decode_sum`` the error names the rank and the tensor (hvd_compress/payload.py).

``out`` is a view into a larger buffer whose guard elements hold a sentinel; a decode that
returns must leave them bit for bit as they were (an index of -3 would add into the third guard
before ``out``, one of 10**7 would crash the process). Values inside ``out`` may change: a
flipped value byte decodes to another value.
"""
import numpy as np
import pytest
import torch
from numba import cuda

import hvd_compress as hc
from hvd_compress.communication import framing
from hvd_compress.communication.base import decode_sum
from hvd_compress.kernels import adacomp_cuda, sparse_cuda
from hvd_compress.methods import METHODS
from hvd_compress.payload import PayloadError

import catalogue

SHAPE = torch.Size([40, 25])  # one size for every method: Numba compiles each kernel once
N = SHAPE.numel()
GUARD = 64
SENTINEL = -7.25
BAD_INDICES = [-1, -3, N, 10**7, 2**31 - 1, -2**31]

# Every method of the registry, by its name with default options, plus configurations whose
# payload layout differs. PowerSGD is left out: it has no payload to decode (its factors are
# summed by Horovod's allreduce, communication/lowrank.py).
SPECS = [name for name in METHODS if name != "powersgd"]
SPECS += [spec for spec in catalogue.encoding() if ":" in spec]
SPECS += ["onebit:granularity=column", "dgc:dense_below=0", "threshold:threshold=0.5"]
# where a payload's last int32 word is an index, the values of it that must be refused
MUST_REFUSE = {"topk": BAD_INDICES, "threshold": BAD_INDICES, "dgc:dense_below=0": BAD_INDICES,
               "adacomp": [N, ~N, 10**7, 2**31 - 1, -2**31]}
MUST_REFUSE["adacomp:bin_size=7"] = MUST_REFUSE["adacomp"]


def test_every_method_but_powersgd_is_fuzzed():
    assert set(METHODS) - {s.split(":")[0] for s in SPECS} == {"powersgd"}


def sound_payloads(spec: str, count: int) -> tuple[hc.Compressor, list[torch.Tensor]]:
    compressor = hc.from_spec(spec)
    payloads = []
    for rank in range(count):
        grad = torch.randn(N, generator=torch.Generator().manual_seed(rank))
        payloads.append(compressor.encode(grad.clone(), grad, SHAPE))
    return compressor, payloads


def with_word(payload: torch.Tensor, at: int, value: int) -> torch.Tensor:
    out = payload.clone()
    out[at:at + 4] = torch.tensor([value], dtype=torch.int64).to(torch.int32).view(torch.uint8)
    return out


def damaged(payload: torch.Tensor, seed: int) -> list[torch.Tensor]:
    """Many damaged versions of ``payload`` (fresh tensors, aligned as received bodies are)."""
    rng = np.random.default_rng(seed)
    size = payload.numel()
    raw = payload.numpy()
    out = [torch.from_numpy(raw[:m].copy()) for m in
           {0, 1, 3, 4, 7, 8, 9, size // 2, size - 8, size - 4, size - 1} if 0 <= m < size]
    for extra in (1, 4, 8, 12, 8 * N + 8):  # extended by zeros, 0xFF, random bytes
        for tail in (np.zeros(extra, np.uint8), np.full(extra, 255, np.uint8),
                     rng.integers(0, 256, extra, dtype=np.uint8)):
            out.append(torch.from_numpy(np.concatenate([raw, tail])))
    for _ in range(30):  # random bytes flipped
        flipped = raw.copy()
        at = rng.integers(0, size, rng.integers(1, 4))
        flipped[at] ^= rng.integers(1, 256, at.size, dtype=np.uint8)
        out.append(torch.from_numpy(flipped))
    words = size // 4
    for at in {0, words // 2, words - 1, *rng.integers(0, max(words, 1), 3)} if words else ():
        out += [with_word(payload, 4 * int(at), v) for v in BAD_INDICES]
    out.append(torch.full((size,), 255, dtype=torch.uint8))
    out += [torch.from_numpy(rng.integers(0, 256, m, dtype=np.uint8)) for m in (size, 8 * (size // 8))]
    return out


def guarded() -> tuple[torch.Tensor, torch.Tensor]:
    buffer = torch.full((N + 2 * GUARD,), SENTINEL)
    out = buffer[GUARD:GUARD + N]
    out.zero_()
    return buffer, out


def guards_intact(buffer: torch.Tensor) -> bool:
    want = torch.full((GUARD,), SENTINEL).view(torch.int32)
    return (torch.equal(buffer[:GUARD].view(torch.int32), want)
            and torch.equal(buffer[-GUARD:].view(torch.int32), want))


def decodes_or_refuses(decode) -> bool:
    """True when ``decode(out)`` raised PayloadError; False when it returned. Either way the
    guards around ``out`` must be intact; any other exception fails the test."""
    buffer, out = guarded()
    try:
        decode(out)
        refused = False
    except PayloadError:
        refused = True
    assert guards_intact(buffer)
    return refused


@pytest.mark.parametrize("spec", SPECS)
def test_damaged_payloads_are_refused_or_stay_inside_out(spec):
    compressor, (sound, other) = sound_payloads(spec, 2)
    assert not decodes_or_refuses(lambda out: compressor.decode_add(sound, out, SHAPE))
    refused = 0
    for bad in damaged(sound, seed=len(spec)):
        one = decodes_or_refuses(lambda out: compressor.decode_add(bad, out, SHAPE))
        # the same payload among sound ones, as separate tensors and as the bodies of one
        # gathered buffer (views, decoded where they lie)
        parts = [other, bad, sound]
        views, _ = framing.unframe(torch.cat([framing.frame(p, 7) for p in parts]), 7, 3, "t")
        views = [v for v in views if v.numel()]  # as decode_sum passes them: an empty body is a
        for given, refuse in ((parts, one), (views, one and bad.numel() > 0)):  # rank without one
            assert decodes_or_refuses(lambda out: compressor.decode_add_all(given, out, SHAPE)) == refuse
        refused += one
    assert refused  # the checks exist: at least the wrong lengths are refused


@pytest.mark.parametrize("spec", sorted(MUST_REFUSE))
def test_an_index_outside_out_is_refused(spec):
    compressor, (sound,) = sound_payloads(spec, 1)
    for value in MUST_REFUSE[spec]:
        bad = with_word(sound, sound.numel() - 4, value)
        assert decodes_or_refuses(lambda out: compressor.decode_add(bad, out, SHAPE))
        assert decodes_or_refuses(lambda out: compressor.decode_add_all([sound, bad], out, SHAPE))


@pytest.mark.parametrize("spec", SPECS)
def test_decode_sum_names_the_rank_and_the_tensor(spec):
    compressor, (p0, p1) = sound_payloads(spec, 2)
    short = p1[:-1].clone()
    empty = torch.empty(0, dtype=torch.uint8)
    gathered = torch.cat([framing.frame(p, 7) for p in (p0, empty, short, p1)])
    bodies, _ = framing.unframe(gathered, 7, 4, "'fc.weight'")
    buffer, out = guarded()
    with pytest.raises(PayloadError, match=r"rank 2 sent a payload for 'fc.weight' that cannot be decoded: "
                                           rf"{short.numel()} bytes"):
        decode_sum(compressor, bodies, out, SHAPE, what="'fc.weight'")
    assert guards_intact(buffer)
    # a two-phase region: one body, from rank first_rank
    with pytest.raises(PayloadError, match="rank 3 sent a payload for 'fc.weight'"):
        decode_sum(compressor, [short], out, SHAPE, what="'fc.weight'", first_rank=3)


@pytest.mark.parametrize("spec", sorted(MUST_REFUSE))
def test_decode_sum_names_the_rank_of_an_index_outside_out(spec):
    """An index error comes from the kernel that decodes every payload in one call; the rank
    is found by decoding them again one at a time."""
    compressor, (p0, p1) = sound_payloads(spec, 2)
    bad = with_word(p1, p1.numel() - 4, 10**7)
    buffer, out = guarded()
    with pytest.raises(PayloadError, match=r"rank 1 sent a payload for 'w' .*indices outside the 1000"):
        decode_sum(compressor, [p0, bad, p0], out, SHAPE, what="'w'")
    assert guards_intact(buffer)


# --- the CUDA twins, under the simulator without a GPU ---------------------------------------

def test_cuda_scatter_add_skips_and_counts_indices_outside_out():
    values = np.float32([1, 2, 3, 4, 5, 6])
    indices = np.int32([0, -3, 999, 1000, 10**7, -2**31])
    buffer = cuda.to_device(np.full(N + 2 * GUARD, SENTINEL, np.float32))
    out = buffer[GUARD:GUARD + N]
    assert sparse_cuda.scatter_add(cuda.to_device(values), cuda.to_device(indices), out) == 4
    host = buffer.copy_to_host()
    want = np.full(N + 2 * GUARD, SENTINEL, np.float32)
    want[GUARD] += 1
    want[GUARD + 999] += 3
    np.testing.assert_array_equal(host, want)


def test_cuda_adacomp_decode_skips_and_counts_indices_outside_out():
    codes = np.int32([0, ~3, 999, 1000, ~1000, 2**31 - 1, -2**31])
    buffer = cuda.to_device(np.full(N + 2 * GUARD, SENTINEL, np.float32))
    out = buffer[GUARD:GUARD + N]
    assert adacomp_cuda.decode_add(cuda.to_device(np.float32([0.5])), cuda.to_device(codes), out) == 4
    want = np.full(N + 2 * GUARD, SENTINEL, np.float32)
    want[GUARD + np.array([0, 999])] += 0.5
    want[GUARD + 3] -= 0.5
    np.testing.assert_array_equal(buffer.copy_to_host(), want)
