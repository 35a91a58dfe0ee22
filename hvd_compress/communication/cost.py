"""A cost model of one step's communication: bytes each worker sends, and time on a link.

Every collective here is one Horovod runs over gloo on CPU tensors, and each is a sequence of
message rounds in which a worker sends to one peer (rings and pairwise exchanges). On p
workers, for a tensor of D dense bytes and a compressed payload of b bytes per rank:

=====================  ==========================  ==============  =========================
method                 bytes sent per worker       message rounds  collective(s)
=====================  ==========================  ==============  =========================
dense ring allreduce   2 (p-1)/p D                 2 (p-1)         allreduce (fp32 or fp16)
allgather of payloads  (p-1) b                     p-1             allgather
two-phase              (p-1)/p b + (p-1) b_r       2 (p-1)         alltoall, then allgather
PowerSGD, rank r       2 (p-1)/p 4 r (rows+cols)   4 (p-1)         allreduce of P, then of Q
hierarchical           (L-1)/L 4n + (L-1) N b(n/L) 3 (p-1)         three alltoalls
                       inside the node, (N-1)
                       b(n/L) across nodes
=====================  ==========================  ==============  =========================

where b_r is the payload of one re-compressed region (about b/p). Received bytes equal sent
bytes in all four. Time on a link of bandwidth B and per-round latency a is
``collectives * c + rounds * a + bytes / B``: every collective pays Horovod's negotiation c,
every round a message latency a, and the workers' links run in parallel. Horovod fuses
allreduces and allgathers of one cycle into one collective, so their c and rounds are paid
once per step, not per tensor. Alltoalls Horovod does not fuse; fusion.py puts a step's
two-phase alltoalls into buckets of up to 25 MB of dense gradient, so a tensor pays the share
of its bucket's alltoall that its dense size is of a bucket (all of it from 25 MB up). Each
framed payload carries an 8-byte header and is padded to 8 bytes (framing.py).

At run time ``communication="auto"`` measures c, a, the bandwidth and the method's CPU on the
user's own cluster (probe.py) and plans with those (``Link``, ``Cpu``). The constants below are
what it plans with when told the link rate instead (``link_gbit``), and what the benches
project with. c and a were measured on the simulated cluster by bench/cost_model.py (a least-squares fit of
small gloo allreduce, allgather and alltoall times at np=2 and 4); the bandwidth is the link's
rate. Both are this machine's, whose workers share 2 cores: a real cluster's are smaller, which
only moves the crossovers of route.py towards smaller tensors. Checked against the simulated
cluster's interface counters by the same bench (docs/benchmarks.md, "Communication at scale").

Two things beyond the wire decide whether compressing a tensor pays (route.py):

* CPU. The compressed path costs the worker CPU that Horovod's dense path does not: a cost per
  encode or decode call (Python, framing, kernel dispatch, Horovod's submission; an allgather
  makes 2, a two-phase allreduce 2p + 3: p chunk encodes and p region decodes, then unframing,
  the region's sum and its re-encode) and one per element (gradient + residual, the kernels,
  the zero-filled sum and the copy back). Fitted by ``bench/cost_model.py cpu``
  (bench/cpu_probe.py: the compress and decode phases of TopK, OneBit and AdaComp, np=2 and 4
  on this machine's 2 cores). Horovod's own per-element work on
  the dense path (fusion-buffer copies, gloo's sums) is not charged to dense, which only
  favours dense. On LeNet-5 at np=4 this is what a step loses with compression: measured,
  1 epoch at 100 Mbit/s took 7.4 s uncompressed, 8.8 s with TopK by two-phase (10 ms of
  compress and 5 of decode a step for 3 tensors) and 5.6 s with TopK by allgather.
* The two-phase second round. Its allgathers start in ``synchronize()``, after the backward
  pass, when the first round has arrived: a round of its own on the step's critical path, paid
  once a step (kind ``"second round"``) whatever number of tensors share it.
"""
from dataclasses import dataclass

from . import framing

#: seconds per message round, and per collective, of Horovod's gloo collectives between the
#: network namespaces of this machine (bench/cost_model.py fit; docs/benchmarks.md, "Communication at scale")
LATENCY_S = 600e-6
OVERHEAD_S = 480e-6
#: CPU seconds of the compressed path per encode or decode call, and per element
#: (bench/cost_model.py cpu; docs/design.md, "Routes")
CALL_CPU_S = 95e-6
ELEMENT_CPU_S = 4.4e-9
#: the link rate a plan assumes when neither told nor measured (Gbit/s)
DEFAULT_GBIT = 1.0
#: the rate a static plan (``link_gbit`` set: the inter-node link's) assumes inside a node,
#: Gbit/s per worker: an assumption (PCIe-class), used only when nothing was measured
INTRA_GBIT = 50.0
#: dense gradient bytes per bucket of two-phase alltoalls (fusion.py; DDP's default bucket_cap_mb)
BUCKET_BYTES = 25 * 2 ** 20


@dataclass(frozen=True)
class Cost:
    """What one worker sends for one tensor (or a step's tensors): ``bytes``; the unfused
    ``collectives`` and their message ``rounds``, paid per tensor; ``fused``: the rounds of
    each kind of collective Horovod fuses, paid once however many tensors share it; ``cpu``:
    seconds of the worker's CPU the compressed path adds. On nodes (hierarchical route):
    ``intra_bytes`` sent inside the node and ``cross_bytes`` across it, beside ``bytes`` of the
    flat collectives."""

    bytes: float
    collectives: float = 0
    rounds: float = 0
    fused: tuple[tuple[str, int], ...] = ()
    cpu: float = 0.0
    intra_bytes: float = 0.0
    cross_bytes: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        fused = dict(self.fused)
        for kind, rounds in other.fused:
            fused[kind] = max(fused.get(kind, 0), rounds)
        return Cost(self.bytes + other.bytes, self.collectives + other.collectives,
                    self.rounds + other.rounds, tuple(sorted(fused.items())), self.cpu + other.cpu,
                    self.intra_bytes + other.intra_bytes, self.cross_bytes + other.cross_bytes)


@dataclass(frozen=True)
class Link:
    """A worker's network link: ``gbit`` per second each way for the flat collectives (on nodes:
    the rate of a ring over every rank, which the inter-node link sets), ``latency_s`` per message
    round, ``overhead_s`` per collective. On nodes, ``intra_gbit`` is a worker's rate to the
    workers of its node, ``cross_gbit`` its share of the node's uplink when every worker of the
    node sends across at once (None: ``gbit``)."""

    gbit: float
    latency_s: float = LATENCY_S
    overhead_s: float = OVERHEAD_S
    intra_gbit: float | None = None
    cross_gbit: float | None = None

    def seconds(self, cost: Cost) -> float:
        """The time ``cost`` takes on this link, fused collectives included."""
        fused = Cost(0.0, len(cost.fused), sum(r for _, r in cost.fused))
        return self.marginal_seconds(cost) + self.marginal_seconds(fused)

    def marginal_seconds(self, cost: Cost) -> float:
        """The time ``cost`` adds to a step whose fused collectives run anyway."""
        bits = (cost.bytes / self.gbit + cost.intra_bytes / (self.intra_gbit or self.gbit)
                + cost.cross_bytes / (self.cross_gbit or self.gbit)) * 8 / 1e9
        return cost.collectives * self.overhead_s + cost.rounds * self.latency_s + bits + cost.cpu


def framed(payload: float) -> float:
    """A payload's bytes on the wire: the header and padding framing.py adds."""
    return framing.HEADER_BYTES + -(-payload // 8) * 8


def dense(dense_bytes: float, p: int) -> Cost:
    """Ring allreduce of ``dense_bytes`` (reduce-scatter, then allgather); fused."""
    return Cost(2 * (p - 1) / p * dense_bytes, fused=(("allreduce", 2 * (p - 1)),))


def allgather(payload: float, p: int) -> Cost:
    """Every rank's framed payload to every other rank; fused."""
    return Cost((p - 1) * framed(payload), fused=(("allgather", p - 1),))


def twophase(payload: float, region_payload: float, p: int, share: float = 1.0) -> Cost:
    """An alltoall that sends p-1 of a rank's p framed chunk payloads (``payload`` bytes in
    all), then an allgather of the rank's re-compressed region (``region_payload``). The
    alltoall's negotiation and rounds are charged at ``share``: the part of its bucket's alltoall
    this tensor pays (fusion.py). The allgather is the step's second round (module docstring)."""
    alltoall = Cost((p - 1) / p * (payload + p * framed(0)), collectives=share, rounds=share * (p - 1))
    return alltoall + Cost((p - 1) * framed(region_payload), fused=(("second round", p - 1),))


def hierarchical(numel: int, shard_payload: float, size: int, count: int, share: float = 1.0,
                 inside: bool = False) -> Cost:
    """``numel`` elements on ``count`` nodes of ``size`` workers (hierarchical.py): a
    reduce-scatter inside the node, dense fp32 or (``inside``) of compressed shards, riding in
    a two-phase bucket's alltoall (charged at ``share`` as there); the shard's payload to the
    ``count`` - 1 cross peers; the ``count`` payloads forwarded to the node's other workers.
    The last two are one alltoall each per step (fused kinds)."""
    p = size * count
    headers = (p - 1) * framed(0)
    step1 = (size - 1) * framed(shard_payload) if inside else (size - 1) / size * 4 * numel
    step3 = (size - 1) * framed(count * framed(shard_payload))
    return Cost(2 * headers, collectives=share, rounds=share * (p - 1),
                fused=(("node cross", p - 1), ("node forward", p - 1)),
                intra_bytes=step1 + step3 + headers, cross_bytes=(count - 1) * framed(shard_payload))


@dataclass(frozen=True)
class Cpu:
    """The compressed path's CPU on one worker: seconds per encode or decode call, and per
    element (gradient + residual, the kernels, the sum and the copy back)."""

    call_s: float = CALL_CPU_S
    element_s: float = ELEMENT_CPU_S


def compute(numel: int, calls: int, cpu: Cpu = Cpu()) -> Cost:
    """The CPU of compressing and decoding ``numel`` elements in ``calls`` encode and decode
    calls (2 on the allgather route, 2p + 3 by two-phase)."""
    return Cost(0.0, cpu=calls * cpu.call_s + numel * cpu.element_s)


def powersgd(rows: int, cols: int, rank: int, p: int) -> Cost:
    """PowerSGD (Vogels et al. 2019) at ``rank``: an fp32 allreduce of P (rows x rank), then,
    after P is orthogonalized, of Q (cols x rank): two fused allreduces in sequence."""
    p_sum, q_sum = dense(4 * rank * rows, p), dense(4 * rank * cols, p)
    return Cost(p_sum.bytes + q_sum.bytes, fused=(("allreduce", 4 * (p - 1)),))
