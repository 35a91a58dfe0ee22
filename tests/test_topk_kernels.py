"""TopK kernels against the numpy reference, in-process."""
import tracemalloc

import numpy as np
import pytest

from hvd_compress.kernels import sparse_cpu, topk_cpu
from hvd_compress.kernels.threads import PARALLEL_MIN

import references


@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.3, 1.0])
def test_exact_matches_reference(vector, ratio):
    k = max(1, int(np.ceil(ratio * vector.size)))
    want_values, want_indices, want_residual = references.topk_exact(vector, k)
    acc = vector.copy()
    values, indices = topk_cpu.topk_exact(acc, k)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(acc, want_residual)


def test_sampled_sends_the_largest_entries_and_keeps_the_rest(vector):
    k = max(1, vector.size // 100)
    acc = vector.copy()
    values, indices = topk_cpu.topk_sampled(acc, k)
    assert 0.8 * k <= values.size <= 1.3 * k or values.size == k
    assert np.all(np.diff(indices) > 0)
    np.testing.assert_array_equal(values, vector[indices])
    unsent = np.delete(vector, indices)
    if unsent.size:
        assert np.abs(values).min() >= np.abs(unsent).max()
    # error feedback: what was sent plus what stays is exactly the input
    rebuilt = acc.copy()
    rebuilt[indices] += values
    np.testing.assert_array_equal(rebuilt, vector)


def test_sampled_overshoot_keeps_exactly_k():
    # A sample that sees only the big plateau overestimates the count: exact re-selection.
    vector = np.ones(100_000, np.float32)
    vector[::7] = 2.0
    acc = vector.copy()
    values, indices = topk_cpu.topk_sampled(acc, 500)
    assert 400 <= values.size <= 650
    assert np.all(values == 2.0)
    np.testing.assert_array_equal(acc[indices], 0)
    assert acc.sum() == vector.sum() - values.sum()


def _ks(size: int) -> list[int]:
    return sorted(k for k in {1, 2, 3, max(1, size // 100), max(1, size // 3), size} if k <= size)


def test_exact_threshold_is_the_kth_largest_magnitude(vector):
    # the radix select on the bits finds bitwise the value np.partition of |x| does
    for k in _ks(vector.size):
        want = np.float32(topk_cpu.kth_largest_magnitude(vector, k))
        got = topk_cpu.kth_largest_in_place(vector, k)
        assert got.view(np.uint32) == want.view(np.uint32), (k, got, want)


def test_exact_threshold_with_nan_and_inf():
    # NaN orders above +Inf in both (np.partition puts NaN last); -Inf is Inf in magnitude
    vector = np.random.default_rng(5).standard_normal(5000).astype(np.float32)
    vector[::5], vector[1::7], vector[2::11] = np.inf, -np.inf, np.nan
    for k in _ks(vector.size):
        want = np.float32(topk_cpu.kth_largest_magnitude(vector, k))
        got = topk_cpu.kth_largest_in_place(vector, k)
        assert (np.isnan(want) and np.isnan(got)) or got.view(np.uint32) == want.view(np.uint32), k


def test_exact_selection_copies_nothing_of_its_input():
    # Issue 30: np.abs and np.partition made two copies of the tensor on every exact selection
    # (and every fallback of the sampled one). Now only the k values and indices are allocated.
    vector = np.random.default_rng(4).standard_normal(PARALLEL_MIN + 4_000_000).astype(np.float32)
    k = vector.size // 100
    topk_cpu.topk_exact(vector.copy(), k)  # compiled or loaded before measuring
    acc = vector.copy()
    tracemalloc.start()
    try:
        values, indices = topk_cpu.topk_exact(acc, k)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < acc.nbytes / 4, peak  # the k values and indices: acc.nbytes / 50
    want_values, want_indices, want_residual = references.topk_exact(vector, k)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(acc, want_residual)


def test_digit_counts_serial_and_parallel_agree():
    vector = np.random.default_rng(6).standard_normal(PARALLEL_MIN + 33).astype(np.float32)
    for shift, width in topk_cpu._DIGITS:
        prefix = int(vector.view(np.uint32)[0] & 0x7FFFFFFF) >> (shift + width)
        serial = np.zeros((1, 1 << width), np.int64)
        parallel = np.zeros((3, 1 << width), np.int64)
        topk_cpu._digit_counts.serial(vector, shift, width, prefix, serial)
        topk_cpu._digit_counts.parallel(vector, shift, width, prefix, parallel)
        np.testing.assert_array_equal(serial[0], parallel.sum(axis=0))
        assert serial.sum() >= 1


def test_sampled_far_overshoot_is_the_exact_selection():
    # Over 2k candidates: exact selection, bitwise the k largest with ties to the lower index
    # (what cutting the candidates kept), without copying out all the candidates.
    vector = np.ones(100_000, np.float32)
    vector[::7] = 2.0
    vector[3::7] = -2.0
    acc = vector.copy()
    values, indices = topk_cpu.topk_sampled(acc, 500)
    want_values, want_indices, want_residual = references.topk_exact(vector, 500)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(acc, want_residual)


def test_parallel_and_serial_builds_agree():
    vector = np.random.default_rng(3).standard_normal(PARALLEL_MIN + 17).astype(np.float32)
    k = 1000
    serial_acc = vector.copy()
    thr = np.float32(topk_cpu.kth_largest_magnitude(vector, k))
    above_s, equal_s = topk_cpu._count.serial(serial_acc, thr)
    above_p, equal_p = topk_cpu._count.parallel(vector.copy(), thr)
    np.testing.assert_array_equal(above_s, above_p)
    np.testing.assert_array_equal(equal_s, equal_p)
    values, indices = topk_cpu.topk_exact(vector.copy(), k)  # takes the parallel build
    want_values, want_indices, _ = references.topk_exact(vector, k)
    np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize("local_ranks, threads", [("1", 2), ("2", 1), ("64", 1)])
def test_ranks_that_fill_their_host_use_the_serial_build(monkeypatch, local_ranks, threads):
    from hvd_compress.kernels import threads as pool

    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", local_ranks)
    pool.threads_per_rank.cache_clear()
    try:
        assert pool.threads_per_rank() == min(threads, pool.numba.config.NUMBA_NUM_THREADS)
    finally:
        pool.threads_per_rank.cache_clear()


def test_scatter_add_matches_reference():
    rng = np.random.default_rng(2)
    values = rng.standard_normal(500).astype(np.float32)
    indices = rng.integers(0, 100, 500).astype(np.int32)  # repeats must add up
    out, want = np.zeros(100, np.float32), np.zeros(100, np.float32)
    sparse_cpu.scatter_add(values, indices, out)
    references.scatter_add(values, indices, want)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
