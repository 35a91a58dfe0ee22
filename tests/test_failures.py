"""A worker that dies mid-training: the survivors stop with Horovod's error in bounded time.

Runs on the simulated cluster (one network namespace per worker, no launcher that would kill
the survivors for us), so it needs root; it skips with the reason otherwise."""
import os
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from netsim import Cluster, unavailable  # noqa: E402

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def test_survivor_stops_with_horovods_error_when_a_peer_dies():
    started = time.monotonic()
    with Cluster(workers=2) as cluster, pytest.raises(RuntimeError) as failure:
        cluster.run([sys.executable, os.path.join(REPO, "tests", "scripts", "dying_worker.py")],
                    timeout=120)
    elapsed = time.monotonic() - started
    message = str(failure.value)
    assert message.startswith("rank 0 exited"), message[:500]  # the survivor, not a timeout
    assert "Horovod" in message and "finished all steps" not in message
    assert elapsed < 120
