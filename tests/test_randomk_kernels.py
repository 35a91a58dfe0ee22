"""Random-k kernels (kernels/randomk_{cpu,cuda}.py) against the numpy reference: the indices a
seed picks, the gather that leaves the residual, and the scatter that decodes."""
import numpy as np
import pytest
from numba import cuda

from hvd_compress.kernels import counter_rng, randomk_cpu, randomk_cuda

import references
from conftest import ADVERSARIAL
from kernel_builds import build  # noqa: F401  (fixture)

SIZES = [1, 2, 7, 8, 9, 1000, 1_000_003]
SEEDS = [0, 1, 2**63 - 1]


def _k(n: int, ratio: float) -> int:
    return min(n, max(1, int(np.ceil(ratio * n))))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("ratio", [0.001, 0.05, 1.0])
def test_indices_match_the_reference_and_are_distinct(n, ratio):
    k = _k(n, ratio)
    for seed in SEEDS + [counter_rng.step_seed(7, 3, n)]:
        got = randomk_cpu.indices(n, k, seed)
        np.testing.assert_array_equal(got, references.randomk_indices(n, k, seed))
        assert np.unique(got).size == k and got.min() >= 0 and got.max() < n
        if k == n:  # all of them: a permutation of range(n)
            np.testing.assert_array_equal(np.sort(got), np.arange(n))


def test_every_index_is_equally_likely():
    """Over many seeds each of n indices is drawn k/n of the time (5 standard deviations)."""
    n, k, seeds = 50, 5, 4000
    counts = np.zeros(n)
    for step in range(seeds):
        counts[randomk_cpu.indices(n, k, counter_rng.step_seed(0, step, n))] += 1
    mean = seeds * k / n
    assert np.abs(counts - mean).max() < 5 * np.sqrt(mean * (1 - k / n))


def test_step_seeds_differ_by_step_and_length_and_fit_int64():
    seeds = {counter_rng.step_seed(s, step, n) for s in (0, 1) for step in range(50) for n in (10, 11)}
    assert len(seeds) == 200
    assert all(0 <= s < 2**63 for s in seeds)
    assert counter_rng.step_seed(3, 4, 5) == counter_rng.step_seed(3, 4, 5)


@pytest.mark.parametrize("seed", SEEDS)
def test_select_and_decode_match_the_reference(vector, build, seed):
    k = _k(vector.size, 0.02)
    want_values, want_residual = references.randomk(vector, k, seed)
    acc = vector.copy()
    values = randomk_cpu.select(acc, k, seed)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(acc, want_residual)
    out = np.zeros_like(vector)
    randomk_cpu.decode_add(np.int64([seed]), values, out)
    np.testing.assert_array_equal(out + acc, vector)  # error feedback: sent + kept == input


@pytest.mark.parametrize("n", SIZES)
def test_select_all_sizes(build, n):
    vector = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    for ratio in (0.01, 1.0):
        k = _k(n, ratio)
        acc = vector.copy()
        values = randomk_cpu.select(acc, k, 99)
        want_values, want_residual = references.randomk(vector, k, 99)
        np.testing.assert_array_equal(values, want_values)
        np.testing.assert_array_equal(acc, want_residual)
        out = np.full(n, 2.0, np.float32)
        randomk_cpu.decode_add(np.int64([99]), values, out)
        want = np.full(n, 2.0, np.float32)
        np.add.at(want, references.randomk_indices(n, k, 99), want_values)
        np.testing.assert_array_equal(out, want)


# --- CUDA, under the simulator without a GPU: small sizes ---------------------------------

@pytest.mark.filterwarnings("ignore:overflow encountered")  # uint64 scalars wrap in the simulator
@pytest.mark.parametrize("case", sorted(ADVERSARIAL) + ["n8", "n7"])
def test_cuda_matches_the_reference(case):
    vector = {"n8": np.arange(8, dtype=np.float32) - 4, "n7": np.arange(7, dtype=np.float32)}.get(case)
    vector = ADVERSARIAL[case] if vector is None else vector
    seed = counter_rng.step_seed(5, 1, vector.size)
    k = _k(vector.size, 0.02)
    np.testing.assert_array_equal(randomk_cuda.indices(vector.size, k, seed).copy_to_host(),
                                  references.randomk_indices(vector.size, k, seed))
    want_values, want_residual = references.randomk(vector, k, seed)
    acc = cuda.to_device(vector)
    values = randomk_cuda.select(acc, k, seed)
    np.testing.assert_array_equal(values.copy_to_host(), want_values)
    np.testing.assert_array_equal(acc.copy_to_host(), want_residual)
    out = cuda.to_device(np.zeros_like(vector))
    randomk_cuda.decode_add(cuda.to_device(np.int64([seed])), values, out)
    np.testing.assert_array_equal(out.copy_to_host() + want_residual, vector)


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_cuda_payload_decodes_on_the_cpu_and_back():
    vector = np.random.default_rng(3).standard_normal(513).astype(np.float32)
    seed = 2**63 - 5
    values = randomk_cuda.select(cuda.to_device(vector.copy()), 11, seed).copy_to_host()
    out = np.zeros_like(vector)
    randomk_cpu.decode_add(np.int64([seed]), values, out)
    index = references.randomk_indices(vector.size, 11, seed)
    np.testing.assert_array_equal(out[index], vector[index])
    assert np.count_nonzero(out) == 11
