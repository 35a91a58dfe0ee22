"""The public API in-process: specs, stats, the Horovod no-op interface, framing, and the
error-feedback invariant of every compressor."""
import pytest
import torch
from horovod.torch import Compression

import hvd_compress as hc
from hvd_compress.communication import framing
from hvd_compress.communication.base import output_for
from hvd_compress.memory import fold

import catalogue

# The catalogue's configurations (tests/catalogue.py): those that keep error feedback's
# invariant, and every one with a payload.
INVARIANT = catalogue.invariant()
ENCODING = catalogue.encoding()


def test_from_spec_builds_configured_compressors():
    c = hc.from_spec("topk:ratio=0.05,selection=exact,min_numel=10")
    assert isinstance(c, hc.TopK)
    assert (c.ratio, c.selection, c.min_numel) == (0.05, "exact", 10)
    assert hc.from_spec(c.spec()).spec() == c.spec()
    assert hc.from_spec("none") is Compression.none
    assert hc.from_spec("fp16") is Compression.fp16


@pytest.mark.parametrize("spec, message", [
    ("nope", "known: adacomp, .*fp16, natural, none, onebit, .*topk, u8bit"),
    ("onebit:scaling=l2", "scaling must be one of"),
    ("adacomp:bin_size=0", "bin_size must be an int >= 1"),
    ("topk:ratio", "expected KEY=VALUE"),
    ("topk:bogus=1", "unknown option 'bogus' for topk .* options: communication, error_feedback, link_gbit, min_numel, ratio"),
    ("topk:ratio=0", r"ratio must be a number in \(0, 1\], got 0"),
    ("topk:ratio=nan", r"ratio must be a number in \(0, 1\], got nan"),
    ("topk:ratio=1.5", r"ratio must be a number in \(0, 1\]"),
    ("topk:ratio=abc", r"ratio must be a number in \(0, 1\], got 'abc'"),
    ("topk:min_numel=-1", "min_numel must be an int >= 0"),
    ("onebit:error_feedback=1", "error_feedback must be True or False, got 1"),
    ("adacomp:bin_size=2.5", "bin_size must be an int >= 1 or None, got 2.5"),
    ("topk:selection=fastest", "selection must be one of"),
])
def test_from_spec_rejects_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        hc.from_spec(spec)


def test_horovod_interface_is_a_noop_that_counts_dense_bytes():
    c = hc.TopK()
    t = torch.randn(10, dtype=torch.float16)
    out, ctx = c.compress(t)
    assert out is t and c.decompress(out, ctx) is t
    assert c.stats() == {"steps": 0, "dense_bytes": 40, "sent_bytes": 20, "per_tensor": {},
                         "seconds": {}, "plan": {}}


@pytest.mark.parametrize("spec", INVARIANT)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_error_feedback_invariant(spec, dtype):
    """decompress(compress(g + r_old)) + r_new == g + r_old, every step."""
    c = hc.from_spec(spec)
    residual = torch.zeros(5000)
    for step in range(4):
        grad = torch.randn(50, 100, generator=torch.Generator().manual_seed(step)).to(dtype)
        expected = grad.float().reshape(-1) + residual
        acc = c.memory.compensate("w", grad)
        decoded = torch.zeros(5000)
        # a whole tensor, then two pieces of it as the two-phase allreduce encodes them
        lo, hi = (0, 5000) if step % 2 == 0 else (1200, 3000)
        if (lo, hi) != (0, 5000):
            expected = expected[lo:hi]
        piece = acc[lo:hi]
        c.decode_add(c.encode(piece, grad.reshape(-1)[lo:hi], grad.shape), decoded[lo:hi], grad.shape)
        torch.testing.assert_close(decoded[lo:hi] + piece, expected, rtol=0, atol=1e-6)
        residual = acc.clone()


@pytest.mark.parametrize("spec", ENCODING)
@pytest.mark.parametrize("keep", [True, False])
def test_fold_encode_is_fold_then_encode(spec, keep):
    """The one call the communicators make (``fold_encode``: one pass where the method fuses
    it) gives bitwise the payload and the residual of folding, then encoding; a non-finite
    gradient gives None."""
    fused, apart = hc.from_spec(spec), hc.from_spec(spec)
    acc_fused, acc_apart = torch.full((5000,), 0.25), torch.full((5000,), 0.25)
    for step in range(3):
        grad = torch.randn(5000, generator=torch.Generator().manual_seed(step))
        payload = fused.fold_encode(acc_fused, grad, torch.Size((50, 100)), keep)
        assert fold(acc_apart, grad, keep)
        assert torch.equal(payload, apart.encode(acc_apart, grad, torch.Size((50, 100))))
        assert torch.equal(acc_fused.view(torch.int32), acc_apart.view(torch.int32))
    grad[123] = float("nan")
    assert fused.fold_encode(acc_fused, grad, torch.Size((50, 100)), keep) is None


def test_the_aggregate_is_decoded_into_the_gradients_own_storage():
    grad = torch.randn(10, 10)
    out = output_for(grad)
    assert out.data_ptr() == grad.data_ptr() and (out == 0).all()
    for other in (torch.randn(10, 10).t(), torch.randn(100, dtype=torch.float16)):
        out = output_for(other)
        assert out.data_ptr() != other.data_ptr() and out.dtype == torch.float32
        assert (out == 0).all() and out.numel() == other.numel()


@pytest.mark.parametrize("spec", ENCODING)
@pytest.mark.parametrize("n", [600, 5000])
def test_an_all_zero_piece_still_makes_a_payload(spec, n):
    """A piece with nothing to send (a two-phase chunk of a layer whose inputs are all dead)
    still gives a payload (an empty one would read as an absent rank), which decodes to zeros,
    or, for the sign methods, to sign(0) = +1."""
    c = hc.from_spec(spec)
    zeros = torch.zeros(n)
    payload = c.encode(c.memory.compensate("w", zeros), zeros, torch.Size((n,)))
    decoded = torch.zeros(n)
    c.decode_add(payload, decoded, torch.Size((n,)))
    assert payload.numel() > 0
    expected = 1.0 if spec.startswith(("signsgd", "signum")) else 0.0
    assert (decoded == expected).all()


def test_without_error_feedback_nothing_carries_over():
    c = hc.from_spec("topk:ratio=0.01,error_feedback=false")
    grad = torch.randn(5000)
    c.encode(c.memory.compensate("w", grad), grad, grad.shape)
    acc = c.memory.compensate("w", grad)
    torch.testing.assert_close(acc, grad)


def test_frames_of_different_lengths_split_back():
    bodies = [torch.arange(n, dtype=torch.uint8) for n in (0, 5, 8, 13)]
    tag = framing.tag_of("topk", 100)
    gathered = torch.cat([framing.frame(b, tag) for b in bodies])
    got, finite = framing.unframe(gathered, tag, 4, "w")
    assert finite
    for part, want in zip(got, bodies):
        assert torch.equal(part, want)


def test_a_non_finite_frame_is_flagged():
    tag = framing.tag_of("onebit", (10,))
    gathered = torch.cat([framing.frame(torch.ones(3, dtype=torch.uint8), tag),
                          framing.frame(torch.empty(0, dtype=torch.uint8), tag, finite=False)])
    bodies, finite = framing.unframe(gathered, tag, 2, "w")
    assert not finite and [b.numel() for b in bodies] == [3, 0]


def test_frames_from_a_differently_configured_rank_are_refused():
    gathered = torch.cat([framing.frame(torch.ones(4, dtype=torch.uint8), framing.tag_of(x))
                          for x in ("topk:ratio=0.01", "topk:ratio=0.02")])
    with pytest.raises(RuntimeError, match="rank 1 sent a payload for w with a different"):
        framing.unframe(gathered, framing.tag_of("topk:ratio=0.01"), 2, "w")
