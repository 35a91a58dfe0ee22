"""A simulated cluster on one machine: one network namespace per node, joined by a bridge,
each node's uplink rate-limited with tc tbf, and Horovod workers launched into them directly
(no horovodrun), so every node has its own NIC and interface byte counters.

    with Cluster(workers=2, rate_mbit=100) as cluster:            # 2 nodes of 1 worker
        outputs = cluster.run([sys.executable, "examples/pytorch_synthetic_benchmark.py", ...],
                              timeout=300)
    with Cluster(workers=8, rate_mbit=100, per_node=4) as cluster:  # 2 nodes of 4 workers

A node's workers share its namespace and hostname, as the GPUs of one machine do: Horovod
gives them real local_rank/local_size/cross_rank values, and what they send each other goes
over the node's own loopback, unlimited (a real node's shared memory or NVLink), while what
leaves the node crosses its rate-limited uplink, whose counters every worker of the node reads.

Needs root, iproute2 (ip netns, veth, bridge, tc tbf) and unshare. Every namespace and process
is torn down on exit, on errors and on SIGTERM. Addresses are 10.77.0.0/24, inside the
namespaces only: nothing leaves the machine.

Facts this relies on (checked on our machines): this kernel has no netem, so links get rates,
not delays. Horovod 0.28.1's gloo contexts for process sets bind to whatever the hostname
resolves to and ignore HOROVOD_GLOO_IFACE, so each worker runs in its own UTS namespace whose
hostname is its own address.
"""
import os
import shutil
import signal
import subprocess
import sys
from typing import Sequence

SUBNET = "10.77.0"
BRIDGE = "br0"
WORKER_IFACE = "eth0"

_RENDEZVOUS = """
import sys
from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.http.http_server import RendezvousServer
hosts = sys.argv[1]
server = RendezvousServer(verbose=0)
port = server.start()
server.init(get_host_assignments(parse_hosts(hosts), len(hosts.split(","))))
print(port, flush=True)
sys.stdin.read()  # serve until the parent closes our stdin
"""


def unavailable() -> str | None:
    """Why a cluster can't be built here, or None if it can."""
    if os.geteuid() != 0:
        return "the simulated cluster needs root (network namespaces, tc)"
    for tool in ("ip", "tc", "unshare", "taskset"):
        if shutil.which(tool) is None:
            return f"the simulated cluster needs '{tool}' (Debian: iproute2, util-linux)"
    probe = f"hc-probe-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "this machine does not allow creating network namespaces"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def exit_unless_available(bench: str) -> None:
    reason = unavailable()
    if reason:
        sys.exit(f"{bench}: can't run: {reason}")


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


class Cluster:
    def __init__(self, workers: int, rate_mbit: float | None = None, per_node: int = 1) -> None:
        if workers % per_node:
            raise ValueError(f"{workers} workers do not fill nodes of {per_node}")
        self.workers, self.per_node = workers, per_node
        self.rate_mbit = rate_mbit
        tag = os.getpid()
        nodes = workers // per_node
        self.bridge_ns = f"hc-br-{tag}"
        self.worker_ns = [f"hc-w{i}-{tag}" for i in range(nodes)]  # one per node
        self.addresses = [f"{SUBNET}.{i + 2}" for i in range(nodes)]
        self._rendezvous = None
        self._previous_sigterm = None

    # --- set-up and teardown ----------------------------------------------------------------
    def __enter__(self) -> "Cluster":
        self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _on_sigterm(self, signum, frame) -> None:
        self.close()
        sys.exit(128 + signum)

    def _limit(self, ns: str, iface: str) -> None:
        if self.rate_mbit:
            _sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", iface, "root", "tbf",
                "rate", f"{self.rate_mbit}mbit", "burst", "1mb", "latency", "100ms")

    def _build(self) -> None:
        _sh("ip", "netns", "add", self.bridge_ns)
        _sh("ip", "-n", self.bridge_ns, "link", "add", BRIDGE, "type", "bridge")
        _sh("ip", "-n", self.bridge_ns, "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
        _sh("ip", "-n", self.bridge_ns, "link", "set", BRIDGE, "up")
        _sh("ip", "-n", self.bridge_ns, "link", "set", "lo", "up")
        for i, (ns, address) in enumerate(zip(self.worker_ns, self.addresses)):
            _sh("ip", "netns", "add", ns)
            _sh("ip", "-n", self.bridge_ns, "link", "add", f"vb{i}", "type", "veth",
                "peer", "name", WORKER_IFACE, "netns", ns)
            _sh("ip", "-n", self.bridge_ns, "link", "set", f"vb{i}", "master", BRIDGE, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", WORKER_IFACE)
            _sh("ip", "-n", ns, "link", "set", WORKER_IFACE, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            self._limit(self.bridge_ns, f"vb{i}")
            self._limit(ns, WORKER_IFACE)

    def close(self) -> None:
        if self._rendezvous is not None:
            self._rendezvous.kill()
            self._rendezvous.wait()
            self._rendezvous = None
        for ns in [*self.worker_ns, self.bridge_ns]:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
            self._previous_sigterm = None

    # --- running a Horovod job ----------------------------------------------------------------
    def _start_rendezvous(self) -> int:
        hosts = ",".join(f"{a}:{self.per_node}" for a in self.addresses)
        self._rendezvous = subprocess.Popen(
            ["ip", "netns", "exec", self.bridge_ns, sys.executable, "-c", _RENDEZVOUS, hosts],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return int(self._rendezvous.stdout.readline())

    def run(self, command: Sequence[str], timeout: float) -> list[str]:
        """Runs ``command`` as one Horovod (or torch.distributed) job, one process per worker
        namespace; returns each rank's stdout. Raises RuntimeError with the output of every
        rank that failed."""
        port = self._start_rendezvous()
        procs = []
        cores = sorted(os.sched_getaffinity(0))
        nodes = len(self.addresses)
        for rank in range(self.workers):
            node, local = divmod(rank, self.per_node)
            ns, address = self.worker_ns[node], self.addresses[node]
            env = dict(os.environ,
                       HOROVOD_GLOO_RENDEZVOUS_ADDR=f"{SUBNET}.1", HOROVOD_GLOO_RENDEZVOUS_PORT=str(port),
                       HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo",
                       HOROVOD_GLOO_IFACE=WORKER_IFACE, HOROVOD_HOSTNAME=address,
                       HOROVOD_RANK=str(rank), HOROVOD_SIZE=str(self.workers),
                       HOROVOD_LOCAL_RANK=str(local), HOROVOD_LOCAL_SIZE=str(self.per_node),
                       HOROVOD_CROSS_RANK=str(node), HOROVOD_CROSS_SIZE=str(nodes),
                       # the same job, for torch.distributed (bench/ddp_worker.py)
                       RANK=str(rank), WORLD_SIZE=str(self.workers), MASTER_ADDR=self.addresses[0],
                       LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(self.per_node),
                       MASTER_PORT="29500", GLOO_SOCKET_IFACE=WORKER_IFACE,
                       PYTHONUNBUFFERED="1")
            script = 'hostname "$0" && exec "$@"'
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--uts", "taskset", "-c", str(cores[rank % len(cores)]),
                 "sh", "-c", script, address, *command],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        try:
            results = [proc.communicate(timeout=timeout) for proc in procs]
            failed = [f"rank {rank} exited with {proc.returncode}:\n{out[-1000:]}\n{err[-2000:]}"
                      for rank, (proc, (out, err)) in enumerate(zip(procs, results)) if proc.returncode]
            if failed:  # every failing rank: the first to fail is not always rank 0
                raise RuntimeError("\n".join(failed))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if self._rendezvous is not None:  # close() (on SIGTERM) may have stopped it already
                self._rendezvous.kill()
                self._rendezvous.wait()
                self._rendezvous = None
        return [out for out, _ in results]
