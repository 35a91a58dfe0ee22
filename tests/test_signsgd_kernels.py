"""Sign-bit kernels (kernels/signsgd_{cpu,cuda}.py, OneBit's packing at levels -1/+1) against
the numpy reference."""
import numpy as np
import pytest
from numba import cuda

from hvd_compress.kernels import signsgd_cpu, signsgd_cuda

import references
from conftest import ADVERSARIAL
from kernel_builds import build  # noqa: F401  (fixture)


def check(vector, bits, residual):
    want_bits, want_residual = references.signs(vector)
    np.testing.assert_array_equal(bits, want_bits)
    np.testing.assert_array_equal(residual, want_residual)


def test_pack_and_unpack_match_the_reference(vector, build):
    acc = vector.copy()
    bits = signsgd_cpu.pack(acc)
    check(vector, bits, acc)
    out = np.full_like(vector, 0.5)
    signsgd_cpu.unpack_add(bits, out)
    np.testing.assert_array_equal(out, 0.5 + references.signs_decode(bits, vector.size))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1_000_003])
def test_sizes(build, n):
    vector = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    vector[::5] = 0.0  # zeros vote +1
    acc = vector.copy()
    bits = signsgd_cpu.pack(acc)
    check(vector, bits, acc)
    out = np.zeros(n, np.float32)
    signsgd_cpu.unpack_add(bits, out)
    np.testing.assert_array_equal(out, np.where(vector >= 0, 1, -1))


@pytest.mark.parametrize("case", sorted(ADVERSARIAL) + ["n9"])
def test_cuda_matches_the_reference(case):
    vector = ADVERSARIAL.get(case, np.float32([1, -1, 0, -0.0, 3, -3, 1e-45, -1e-45, 2]))
    acc = cuda.to_device(vector)
    bits = signsgd_cuda.pack(acc)
    check(vector, bits.copy_to_host(), acc.copy_to_host())
    out = cuda.to_device(np.zeros_like(vector))
    signsgd_cuda.unpack_add(bits, out)
    np.testing.assert_array_equal(out.copy_to_host(), references.signs_decode(bits.copy_to_host(), vector.size))
