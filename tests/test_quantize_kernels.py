"""Byte-code quantization kernels (kernels/quantize{,_cpu,_cuda}.py) of QSGD, TernGrad, u8bit
and natural compression against the numpy references: scales, codes, residual and decoded
values bit for bit, on the CPU (serial and parallel builds) and under the CUDA simulator;
unbiasedness of the stochastic ones over many seeds; exact payload sizes."""
import numpy as np
import pytest
import torch
from numba import cuda

import hvd_compress as hc
from hvd_compress.kernels import quantize, quantize_cpu, quantize_cuda

import references
from conftest import ADVERSARIAL
from kernel_builds import build  # noqa: F401  (fixture)

# name: (scheme, bucket, reference mode, levels, clip)
METHODS = {
    "qsgd": (quantize.qsgd(127), 512, "linear", 127, np.inf),
    "qsgd_s3_b7": (quantize.qsgd(3), 7, "linear", 3, np.inf),
    "terngrad": (quantize.TERNGRAD, 1, "linear", 1, np.inf),
    "terngrad_clip": (quantize.TERNGRAD, 1, "linear", 1, 0.75),
    "u8bit": (quantize.U8BIT, 512, "nearest", 1, np.inf),
    "u8bit_b7": (quantize.U8BIT, 7, "nearest", 1, np.inf),
    "natural": (quantize.NATURAL_POWERS, 1, "natural", 1, np.inf),
    # no method's: 2-bit codes in buckets (bytes shared across buckets), one bucket > a CPU block
    "ternary_b7": (quantize.Scheme(quantize.LINEAR, 2, "max", 1), 7, "linear", 1, np.inf),
    "qsgd_b100k": (quantize.qsgd(5), 100_000, "linear", 5, np.inf),
}
SEED = 0xDEADBEEF12345678
NON_FINITE = {"nan": np.float32([1, -2, np.nan, 3] * 300), "inf": np.float32([1, -np.inf, 0.5] * 401),
              "huge_norm": np.full(700, 3e38, np.float32), "tiny": np.float32([1e-45, -3e-45, 2e-40, 0] * 200)}
overflow = pytest.mark.filterwarnings("ignore:overflow encountered")  # uint64 wraps in the simulator


def reference_scales(vector: np.ndarray, method: str) -> np.ndarray:
    scheme, bucket, _, _, clip = METHODS[method]
    if scheme.scale == "l2":
        return references.l2_norms(vector, bucket)
    largest = references.max_abs(vector, vector.size if scheme.whole else bucket)
    if scheme.scale == "max":
        return np.minimum(largest, np.float32(clip))  # a NaN stays NaN
    m = largest[0]
    if not np.isfinite(m):
        return np.float32([np.nan])
    return np.float32([0.0 if m == 0 else 2.0 ** (np.frexp(m)[1] - 1)])


def check(k, vector: np.ndarray, method: str, to_host=lambda a: a, to_device=lambda a: a) -> None:
    scheme, bucket, mode, levels, clip = METHODS[method]
    bucket_of = vector.size if scheme.whole else bucket
    want_scales = reference_scales(vector, method)
    want_codes, want_values, want_residual = references.quantize(
        vector, want_scales, bucket_of, mode, scheme.bits, SEED, levels, clip)
    acc = to_device(vector.copy())
    scales, codes = quantize.encode(k, acc, scheme, bucket, SEED, clip)
    np.testing.assert_array_equal(to_host(scales), want_scales)
    np.testing.assert_array_equal(to_host(codes), want_codes)
    np.testing.assert_array_equal(to_host(acc), want_residual)
    assert 4 * want_scales.size + want_codes.size == scheme.payload_bytes(vector.size, bucket)
    out = to_device(np.full_like(vector, 0.5))
    quantize.decode_add(k, scales, codes, out, scheme, bucket)
    np.testing.assert_array_equal(to_host(out), np.float32(0.5) + want_values)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_cpu_matches_the_reference(vector, build, method):
    check(quantize_cpu, vector, method)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("n", [1, 3, 4, 5, 511, 512, 513, 4_097, 16_387, 1_000_003])
def test_cpu_sizes(build, method, n):
    check(quantize_cpu, np.random.default_rng(n).standard_normal(n).astype(np.float32) * 1e-3, method)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("case", sorted(NON_FINITE))
def test_non_finite_and_extreme_inputs(build, method, case):
    check(quantize_cpu, NON_FINITE[case], method)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_non_finite_entry_makes_its_bucket_nan_and_no_other(method):
    scheme, bucket, *_ = METHODS[method]
    vector = np.random.default_rng(2).standard_normal(3 * 512).astype(np.float32)
    vector[5] = np.inf
    out = np.zeros_like(vector)
    quantize.decode_add(quantize_cpu, *quantize.encode(quantize_cpu, vector.copy(), scheme, bucket, 1),
                        out, scheme, bucket)
    nan = np.isnan(out)
    if scheme.whole:
        assert nan.all()
    else:
        assert nan[:bucket].all() and not nan[bucket:].any()


def test_cpu_encodes_wide_ranges_and_tiny_pieces():
    """Magnitudes over 100 binades, and a piece of subnormals only (natural's scale 2**emax
    with emax < -126, its codes from subnormal bits): the CPU kernels' bit-level paths."""
    rng = np.random.default_rng(9)
    wide = (rng.standard_normal(70_001) * np.exp(rng.uniform(-80, 80, 70_001))).astype(np.float32)
    tiny = (rng.standard_normal(5_000) * 1e-42).astype(np.float32)
    for vector in (wide, tiny):
        for method in METHODS:
            check(quantize_cpu, vector, method)


def test_u8bit_cells_hold_one_midpoint_each():
    """The CPU kernel finds a u8bit code in the cell of q (its float64 exponent and top 7
    mantissa bits): each cell must hold at most one midpoint, whose mean of sides is exact."""
    mids = quantize.U8BIT.midpoints()
    first, last, below, sides = quantize_cpu._cell_table(mids.tobytes(), quantize.U8BIT.table()[:128].tobytes())
    assert np.bincount((mids.view(np.int64) >> 45) - first - 1).max() == 1
    q = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, 2), [1e-300, 1.0, 1.5]])
    cell = np.clip((q.view(np.int64) >> 45) - first, 0, last)
    mid = (sides[2 * cell].astype(np.float64) + sides[2 * cell + 1]) / 2
    np.testing.assert_array_equal(below[cell] + (mid < q), np.searchsorted(mids, q, "left"))


def test_u8bit_codebook_is_dettmers_dynamic_tree():
    magnitudes = quantize.dynamic_magnitudes()
    np.testing.assert_array_equal(magnitudes, references.dettmers_magnitudes())  # code = tree bits
    assert magnitudes.size == 128 and magnitudes[0] == 0 and magnitudes[-1] == 1
    assert (np.diff(magnitudes) > 0).all() and magnitudes[1] == np.float32(1e-6)


def test_u8bit_rounds_to_the_nearest_code():
    vector = np.random.default_rng(5).standard_normal(4096).astype(np.float32) ** 3
    out = np.zeros_like(vector)
    scheme = quantize.U8BIT
    scales, codes = quantize.encode(quantize_cpu, vector.copy(), scheme, 512, 0)
    quantize.decode_add(quantize_cpu, scales, codes, out, scheme, 512)
    grid = quantize.dynamic_magnitudes()
    scale = np.repeat(scales, 512).astype(np.float64)
    best = np.abs(np.abs(vector)[:, None] / scale[:, None] - grid[None, :]).min(axis=1) * scale
    error = np.abs(out.astype(np.float64) - vector)
    assert (error <= best + np.abs(out) * 2.0 ** -23 + np.abs(vector) * 1e-12).all()  # up to rounding


# --- unbiasedness ------------------------------------------------------------------------------

def _gaps(vector: np.ndarray, method: str, scales: np.ndarray) -> np.ndarray:
    """The distance between the two values each entry can round to."""
    scheme, bucket, _, levels, _ = METHODS[method]
    if method.startswith("natural"):
        e = np.frexp(np.abs(vector))[1] - 1
        lowest = np.frexp(scales[0])[1] - 1 - 125
        return np.ldexp(1.0, np.maximum(e, lowest))
    bucket = vector.size if scheme.whole else bucket
    return scales[np.arange(vector.size) // bucket].astype(np.float64) / levels


@pytest.mark.parametrize("method", ["qsgd", "qsgd_s3_b7", "terngrad", "natural"])
def test_unbiased_over_seeds(method):
    """Each entry's decoded value takes one of two values a gap g apart, so its variance is at
    most g**2 / 4 and the mean of S independent draws deviates from the entry by more than
    6 g / (2 sqrt(S)) with probability below 2e-9 (normal approximation, S = 4000), for n = 300
    entries below 1e-6 in all; the uniform draws' 2**-24 resolution biases by at most g 2**-24."""
    scheme, bucket, *_ = METHODS[method]
    rng = np.random.default_rng(7)
    vector = (rng.standard_normal(300) * np.exp(rng.uniform(-4, 4, 300))).astype(np.float32)
    draws = 4000
    total = np.zeros(vector.size)
    for seed in range(draws):
        scales, codes = quantize.encode(quantize_cpu, vector.copy(), scheme, bucket, seed * 7919 + 1)
        out = np.zeros_like(vector)
        quantize.decode_add(quantize_cpu, scales, codes, out, scheme, bucket)
        total += out
    gap = _gaps(vector, method, scales)
    tolerance = 6 * gap / (2 * np.sqrt(draws)) + gap * 2.0 ** -24 + 1e-6 * np.abs(vector)
    assert (np.abs(total / draws - vector) <= tolerance).all()


def test_terngrad_clipping_bounds_the_scale():
    vector = np.float32([10.0, -1.0, 0.5, 0.25] * 100)
    scales, _ = quantize.encode(quantize_cpu, vector.copy(), quantize.TERNGRAD, 1, 3, clip=2.0)
    assert scales[0] == 2.0


# --- CUDA, under the simulator without a GPU: small sizes -----------------------------------------

@overflow
@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("case", sorted(ADVERSARIAL) + ["nan", "inf", "tiny", "n1500"])
def test_cuda_matches_the_reference(method, case):
    vector = {**ADVERSARIAL, **NON_FINITE}.get(case)
    if vector is None:
        vector = np.random.default_rng(4).standard_normal(1500).astype(np.float32)
    check(quantize_cuda, vector, method, to_host=lambda a: a.copy_to_host(), to_device=cuda.to_device)


# --- the compressors ------------------------------------------------------------------------------

SPECS = ["qsgd", "qsgd:levels=3,bucket_size=7", "terngrad", "terngrad:clip=2.5", "u8bit",
         "u8bit:bucket_size=100", "natural"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", [1, 4, 5, 7, 512, 513, 5000])
def test_expected_bytes_is_exact(spec, n):
    c = hc.from_spec(spec)
    grad = torch.randn(n)
    acc = grad.clone()
    assert c.encode(acc, grad, grad.shape).numel() == c.expected_bytes(n, grad.shape)


def test_noise_is_per_rank_and_per_step_and_decoding_is_deterministic():
    grad = torch.randn(5000)

    def payload(rank, steps=1):
        c = hc.QSGD(levels=1)
        c.noise_rank = rank
        buf = torch.zeros(5000)
        for _ in range(steps):
            buf.copy_(grad)
            body = c.encode(buf, grad, grad.shape)
        return body

    assert torch.equal(payload(0), payload(0))
    assert not torch.equal(payload(0), payload(1))
    assert not torch.equal(payload(0), payload(0, steps=2))
    c = hc.QSGD()
    once, twice = torch.zeros(5000), torch.zeros(5000)
    body = payload(3)
    c.decode_add(body, once, grad.shape)
    c.decode_add(body, twice, grad.shape)
    assert torch.equal(once, twice)


@pytest.mark.parametrize("spec, message", [
    ("qsgd:levels=128", r"levels must be an int in \[1, 127\]"), ("qsgd:levels=0", "levels must be"),
    ("qsgd:bucket_size=0", "bucket_size must be an int >= 1"), ("qsgd:seed=-1", "seed must be an int >= 0"),
    ("terngrad:clip=-1", "clip must be a number >= 0"), ("terngrad:clip=nan", "clip must be"),
    ("u8bit:seed=1", "unknown option 'seed'"), ("natural:bucket_size=5", "unknown option 'bucket_size'"),
])
def test_bad_options_are_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        hc.from_spec(spec)


def test_error_feedback_defaults():
    assert [hc.from_spec(m).error_feedback for m in ("qsgd", "terngrad", "u8bit", "natural")] == \
        [False, False, True, False]
