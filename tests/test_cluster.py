"""Wire bytes on the simulated cluster, read from each worker's interface counters.

Needs root and network namespaces (bench/netsim.py); skips with the reason otherwise. Kept small
(2 workers, a few steps of a 12.6M-parameter MLP); bench/wire_bytes.py runs the full sweep.
"""
import json
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from netsim import Cluster, unavailable  # noqa: E402
from throughput import command  # noqa: E402

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def tx_bytes_per_step(compression: str) -> float:
    with Cluster(workers=2, rate_mbit=2000) as cluster:
        outputs = cluster.run(command(compression, "widemlp", batch_size=32, steps=3, warmup=2),
                              timeout=300)
    return max(json.loads(out.strip().splitlines()[-1])["tx_bytes_per_step"] for out in outputs)


def test_compressed_payloads_are_what_crosses_the_wire():
    dense = tx_bytes_per_step("none")
    assert dense > 4 * 12.5e6 * 0.9  # a ring allreduce of 12.6M fp32 sends about n*4 bytes at np=2
    assert tx_bytes_per_step("topk:ratio=0.01") < dense / 20
    assert tx_bytes_per_step("onebit:communication=twophase") < dense / 20


def test_namespaces_are_torn_down():
    import subprocess

    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    with Cluster(workers=2) as cluster:
        names = [cluster.bridge_ns, *cluster.worker_ns]
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(name in listed for name in names)
    after = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in after for name in names)
    assert after == before
