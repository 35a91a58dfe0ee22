"""The ``build`` fixture: run a test with every ``serial_and_parallel`` kernel forced to its
serial build, or to its parallel one whatever the array's size (import it into a test module)."""
import pytest

from hvd_compress.kernels import threads


@pytest.fixture(params=["serial", "parallel"])
def build(request, monkeypatch) -> str:
    if request.param == "serial":
        monkeypatch.setattr(threads, "threads_per_rank", lambda: 1)
    else:
        monkeypatch.setattr(threads, "threads_per_rank", lambda: 2)
        monkeypatch.setattr(threads, "PARALLEL_MIN", 0)
    return request.param
