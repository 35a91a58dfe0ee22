"""The test harness itself: a launch that hangs fails in bounded time and leaves no workers."""
import time

import pytest

from harness import launched, run_workers


def _rank0_waits_forever() -> None:
    import time

    import horovod.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 0:
        hvd.allreduce(torch.ones(1), name="never")  # rank 1 never joins it...
    else:
        time.sleep(3600)  # ...nor ends, which would shut Horovod down


def test_a_hanging_launch_times_out_and_its_workers_are_killed():
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="ran past 20 s"):
        run_workers(_rank0_waits_forever, 2, timeout=20)
    assert time.monotonic() - started < 60
    assert not launched()
