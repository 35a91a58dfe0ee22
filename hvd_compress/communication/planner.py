"""``communication="auto"`` on the user's own cluster: measure the world, try the best plans for
real, keep the fastest. Nothing here comes from the machine hvd_compress was developed on.

Per optimizer and Horovod world (a new world after an elastic reset starts over):

1. Warm-up, step 0: every tensor dense, exactly as Horovod alone sends it.
2. At the end of step 0's ``synchronize()``: measure the link and this method's CPU (probe.py,
   the maximum over ranks), and ask the cost model (route.candidates) for its plans on that
   world. The candidates are: everything dense, and the model's best plan and its runner-up
   among those it predicts faster than dense by more than ``MARGIN`` (on nodes of several
   workers, also the best flat plan and the best hierarchical one among those). With none of those the
   plan is all dense at once, and nothing is tried: measured on LeNet-5 over a fast link,
   trying plans that could not win cost more than they could find (a noisy trial sometimes
   picked a compressed plan 2x slower).
3. Trials: each candidate runs a block of consecutive steps, all dense first: at least
   ``MIN_BLOCK`` steps and ``BLOCK_S`` seconds (on the slowest rank), at most ``MAX_BLOCK``
   steps. A step's time runs from the end of one ``synchronize()`` to the end of the next
   (forward, backward, communication, and the previous update, which is the same for every
   plan). A candidate's time is the median of the second half of its block (the first half
   pays the switch: buffers, first collectives of a kind, caches), the maximum over ranks (the
   slowest rank sets a synchronous step's pace). Millisecond steps (LeNet-5 on a fast link)
   get long blocks: measured, the first few steps after the probe or a switch ran at twice
   the steady step's time there, enough to pick the wrong plan from 4-step blocks. The
   fastest candidate is final, and all dense unless another is faster by more than
   ``MARGIN``. So a cluster where compression does not pay gets Horovod's own step,
   one where the model is wrong gets whichever plan measured fastest, not the model's guess,
   and a plan within ``MARGIN`` of dense is not worth the risk of a noisy trial: what that
   leaves on the table is at most ``MARGIN`` of the best plan's speed.
   Consecutive steps, not candidates taking turns: a link that lets bursts through faster than
   its rate (a token bucket, as the simulated cluster's tc tbf with its 1 MB bucket; cloud
   NICs' burst credits) would otherwise show the heavy plan at burst speed after each light
   step. For the same reason the link probe runs last, right before the dense block: its bulk
   transfers leave the bucket as a steady run of dense steps would.
4. Confirmation: if the final plan's first ``WINDOW`` steps (their median, the slowest rank's)
   ran slower than its own trial by more than ``DRIFT`` and slower than another candidate's trial
   by more than ``MARGIN``, the trials misled, and they run again (at most ``RETRIALS`` times a
   world; plans within noise of each other do not trigger it). Until then the plan's state is
   ``"confirming"``, then ``"final"``. Measured on the simulated
   cluster (LeNet-5, np=2, 100 Mbit/s, AdaComp), one launch in nine: the dense block ran at
   10.4 ms a step in its trial (a burst the link's token bucket let through), the allgather
   block at 17.7 ms (a stall of the shared cores), so dense was kept, and then ran at 20.9 ms
   a step against the compressed plan's 5 ms in the other eight launches.
5. Every ``RECHECK`` steps the median of the last ``WINDOW`` step times is compared with the
   median of the final plan's first ``WINDOW`` steps; if it drifted by more than ``DRIFT`` on any
   rank, the trials run again: every candidate where the plan is dense, the compressed ones only
   where it is not (with a single one, the plan stays and its drift baseline restarts). Once a
   model has trained on compressed gradients, going dense costs training quality: measured
   (bench/route_switch.py, the PTB LSTM at np=2 with AdaComp), a switch to dense for good at
   step 60 of 104 left validation perplexity at 1034 where the compressed run ended at 723 (and
   Horovod alone at 828), with the residual released as below or dropped alike. So a drift does
   not send a compressed plan back to dense: the speed dense might win after a drift (a link
   that became faster) is traded for the quality a switch costs; the first trials and their
   confirmation, in the first steps, do choose dense where it is faster. A resumed plan
   measures its candidates at its first drift.

A compressor resumed from a checkpoint whose plan was final (``Compressor.load_state_dict``, same
world size and tensors) takes that plan at once, without warm-up, probe or trials, so that a
resume stays bitwise.

The planner's agreements have one name per purpose, never one per step (the probe's dozen,
once a world, have one each: probe.py says why). Horovod keeps every name it has reduced in its
response cache, and each of its cycles pays for the names cached. Measured on the simulated
cluster (LeNet-5, np=2, 1 Gbit/s, median steps of interleaved launches): plain Horovod after 300
one-off allreduces stepped in 4.8-6.6 ms against 2.5-3.4 ms without them (5 launches each),
after 130 in 4.1-4.2 against 2.5-3.0, after 30 or 45 as without. A name per trial step had left
about 200 behind, and the dense steps after trials ran at 5.0-6.9 ms against `none`'s 2.2 in
the same rounds (4 launches), not with ``HOROVOD_CACHE_CAPACITY=0`` (2 launches: 2.3-2.6
against 2.2).
Now a world of ``auto`` adds about twenty names (the probe's dozen, 28 on nodes; ``block``,
``trials.N``, ``confirm``, ``drift``) and its routes a few per tensor.

Every decision is taken from figures every rank holds alike (each comes through an allreduce of
the maximum), at the same step on every rank, so every rank takes the same routes.

Switching a tensor between routes keeps error feedback exact: no residual is lost or applied
twice. A tensor leaving two-phase folds its server residual (its region of the reduced sum, not
yet sent) into the worker residual of the rank that holds it, scaled to the worker's units
(times p when the optimizer averages). A tensor going dense adds its worker residual to its next
gradient, once, and the residual is dropped (``release``).

Cost, measured per model in docs/benchmarks.md ("Choosing routes"): the probe (0.3 to 0.7 s at np=2),
the trial steps on plans slower than the final one, one 8-byte allreduce per trial step past a
block's fourth, and one more to confirm the final plan. The plan is final after 1 + 4 to 64 steps per
candidate + ``WINDOW`` steps of confirmation (times 1 + the re-trials), or at step 1 without trials.
"""
import statistics
import time
from collections import deque

import torch

from ..compressor import Compressor
from . import cost, hierarchical, probe, route
from .base import Exchange
from .twophase import chunk_bounds

MIN_BLOCK, BLOCK_S, MAX_BLOCK = 4, 0.25, 64
MARGIN = 0.05
RECHECK, WINDOW, DRIFT = 200, 20, 0.25
RETRIALS = 2
DENSE = "dense"


class Planner:
    """The routes of one optimizer's compressible tensors in one world (module docstring)."""

    def __init__(self, compressor: Compressor, tensors: list[route.Tensor], exchange: Exchange,
                 world: int) -> None:
        self.compressor, self.tensors, self.exchange = compressor, tensors, exchange
        self.prefix = f"{exchange.prefix}.auto{world}"
        self.routes = {name: DENSE for name, _, _ in tensors}
        #: names whose worker residual is added to their next dense gradient
        self.release: set[str] = set()
        self.plans: list[dict[str, str]] = []
        self.trying: list[int] = []  # the candidates (indexes into plans) of this round of trials
        self.trial: int | None = None  # the one the trials run now (an index into trying)
        self.steady: list[float] = []  # each tried candidate's step time
        self.tried: dict[int, float] = {}  # plan index -> its step time in the last trials, the slowest rank's
        self.chosen = 0
        self.retrials = 0
        #: whether the model has trained on a compressed plan made final: its drifts then re-try
        #: the compressed candidates only (module docstring, 5)
        self.settled = False
        self.times: deque | list[float] = []
        self.step = 0
        self.final_step: int | None = None
        self.final_time: float | None = None  # the drift check's baseline, once measured
        self.last = time.perf_counter()
        self.report: dict = {"state": "warm-up"}
        compressor.accounting.plan = self.report
        resumed = compressor.resumed_routes
        if resumed is not None and set(resumed) == set(self.routes):
            self.routes, self.final_step, self.final_time = dict(resumed), 0, None
            self.settled = set(self.routes.values()) != {DENSE}
            self.times = deque(maxlen=WINDOW)
            self.report.update({"state": "final", "resumed": True, "routes": dict(resumed)})

    def step_finished(self) -> bool:
        """Called at the end of each step's ``synchronize()``; returns whether the routes changed."""
        now = time.perf_counter()
        elapsed, self.last = now - self.last, now
        self.step += 1
        if self.step == 1 and self.final_step is None:
            self._measure()
            if len(self.plans) == 1:  # nothing predicted to beat dense: no trials
                self.final_step, self.times = self.step, deque(maxlen=WINDOW)
                self.report.update({"state": "final", "chosen": 0, "final_at_step": self.step,
                                    "routes": dict(self.routes)})
                return False
            return self._begin_trials()
        if self.trial is not None:
            self.times.append(elapsed)
            if not self._block_done():
                return False
            self.steady.append(statistics.median(self.times[len(self.times) // 2:]))
            self.trial, self.times = self.trial + 1, []
            if self.trial < len(self.trying):
                return self._use(self.plans[self.trying[self.trial]])
            return self._decide()
        self.times.append(elapsed)  # the last WINDOW steps
        if self.final_time is None:  # the drift check's baseline: the plan's first steps
            if len(self.times) == WINDOW:
                self.final_time = statistics.median(self.times)
                return self._confirm()
            return False
        if (self.step - self.final_step) % RECHECK == 0:
            window = statistics.median(self.times)
            drift = probe.agreed([abs(window / self.final_time - 1)], self.exchange.process_set,
                                 f"{self.prefix}.drift")[0]
            self.report["drift"] = drift
            if drift > DRIFT:
                return self._begin_trials()
        return False

    def _measure(self) -> None:
        ranks = self.exchange.process_set.size()
        started = time.perf_counter()
        cpu = probe.cpu(self.compressor, ranks)
        timed = time.perf_counter()
        nodes = self.exchange.nodes
        link = probe.link(self.exchange.process_set, f"{self.prefix}.probe", nodes)
        self.report.update({"cpu_probe_s": timed - started, "link_probe_s": time.perf_counter() - timed})
        figures = probe.agreed([1 / link.gbit, link.latency_s, link.overhead_s, cpu.call_s, cpu.element_s,
                                1 / (link.intra_gbit or link.gbit), 1 / (link.cross_gbit or link.gbit)],
                               self.exchange.process_set, f"{self.prefix}.agree")
        link = cost.Link(1 / figures[0], figures[1], figures[2], 1 / figures[5], 1 / figures[6])
        cpu = cost.Cpu(figures[3], figures[4])
        predicted = route.candidates(self.compressor, self.tensors, ranks, link, cpu, nodes)
        dense = next(plan for plan in predicted if set(plan[1].values()) == {DENSE})
        faster = [plan for plan in predicted if plan is not dense and plan[0] < (1 - MARGIN) * dense[0]]
        best = faster[:2]
        if nodes:
            # on nodes, the best flat plan and the best hierarchical one are tried too, whatever
            # the model ranks first: measured on the simulated cluster of nodes (2 x 4, 100 Mbit/s,
            # ResNet-18), the model ranked two hierarchical plans first, their trials ran 1.3x
            # slower than the flat allgather it had not proposed, and auto kept the slower plan
            node = [plan for plan in faster if set(plan[1].values()) & set(hierarchical.ROUTES)]
            flat = [plan for plan in faster if plan not in node]
            best += [plan for plan in flat[:1] + node[:1] if plan not in best]
        self.plans = [dense[1], *(routes for _, routes in best)]
        self.report.update({
            "measured": {"gbit": link.gbit, "latency_s": link.latency_s, "overhead_s": link.overhead_s,
                         "call_s": cpu.call_s, "element_s": cpu.element_s,
                         **({"intra_gbit": link.intra_gbit, "cross_gbit": link.cross_gbit} if nodes else {})},
            "probe_s": time.perf_counter() - started,
            "candidates": [{"predicted_s": seconds, "routes": _summary(routes)}
                           for seconds, routes in [dense, *best]]})
        self.last = time.perf_counter()  # the probe is not part of the next step

    def _begin_trials(self) -> bool:
        """Starts a round of trials: every candidate, or after a drift of a compressed plan the
        compressed candidates only (module docstring, 5)."""
        if not self.plans:  # resumed from a checkpoint: no candidates measured yet
            self._measure()
        self.trying = [i for i, plan in enumerate(self.plans) if not self.settled or set(plan.values()) != {DENSE}]
        if len(self.trying) < 2 and self.settled:  # nothing to compare the plan with: it stays
            self.final_time, self.report["kept_at_step"] = None, self.step  # a new drift baseline
            return False
        self.trial, self.steady, self.times = 0, [], []
        self.report["state"] = "trials"
        return self._use(self.plans[self.trying[0]])

    def _block_done(self) -> bool:
        """Whether the current candidate has run long enough, on every rank alike."""
        if len(self.times) < MIN_BLOCK:
            return False
        if len(self.times) >= MAX_BLOCK:
            return True
        longest = probe.agreed([sum(self.times)], self.exchange.process_set,
                               f"{self.prefix}.block")[0]
        self.last = time.perf_counter()  # the agreement is not part of the next step
        return longest >= BLOCK_S

    def _decide(self) -> bool:
        steady = probe.agreed(self.steady, self.exchange.process_set, f"{self.prefix}.trials.{len(self.steady)}")
        tried = dict(zip(self.trying, steady))
        chosen = min(tried, key=tried.__getitem__)
        if 0 in tried and tried[chosen] > (1 - MARGIN) * tried[0]:
            chosen = 0  # not clearly faster than Horovod alone
        self.tried, self.chosen = tried, chosen
        self.trial, self.times = None, deque(maxlen=WINDOW)
        self.final_step, self.final_time = self.step, None
        for i, seconds in tried.items():
            self.report["candidates"][i]["measured_s"] = seconds
        confirming = len(tried) > 1 and self.retrials < RETRIALS  # a drift's re-trial of dense alone: none
        self.report.update({"state": "confirming" if confirming else "final", "chosen": chosen,
                            "final_at_step": self.step})
        return self._use(self.plans[chosen])

    def _confirm(self) -> bool:
        """Runs the trials again if the final plan's first steps (``final_time``, the slowest
        rank's) contradict the trials (module docstring); else the plan stays, and a compressed
        one is settled."""
        if self.report["state"] == "confirming":  # else no trials ran, or no re-trial is left
            rivals = [seconds for i, seconds in self.tried.items() if i != self.chosen]
            steady = probe.agreed([self.final_time], self.exchange.process_set,
                                  f"{self.prefix}.confirm")[0]
            self.last = time.perf_counter()  # the agreement is not part of the next step
            self.report["confirm_s"] = steady
            if steady > (1 + DRIFT) * self.tried[self.chosen] and steady > (1 + MARGIN) * min(rivals):
                self.retrials += 1
                self.report["retrials"] = self.retrials
                return self._begin_trials()
            self.report.update({"state": "final", "final_at_step": self.step})
        self.settled = set(self.routes.values()) != {DENSE}
        return False

    def _use(self, routes: dict[str, str]) -> bool:
        """Takes ``routes`` for the next step, moving residuals as the module docstring says."""
        changed = [name for name in routes if routes[name] != self.routes[name]]
        ranks, rank = self.exchange.process_set.size(), self.exchange.process_set.rank()
        for name in changed:
            if self.routes[name] == "twophase":
                self._fold_into_worker(name, f"{name}#server", ranks, rank,
                                       ranks if self.exchange.average else 1)
            if self.routes[name] in hierarchical.ROUTES:  # node-mean units: the worker's are L times
                nodes = self.exchange.nodes
                self._fold_into_worker(name, f"{name}{hierarchical.SHARD_KEY}", nodes.size,
                                       nodes.local_rank, nodes.size)
            if routes[name] == DENSE:
                self.release.add(name)
            else:
                self.release.discard(name)
        self.routes = dict(routes)
        self.report["routes"] = dict(self.routes)
        return bool(changed)

    def _fold_into_worker(self, name: str, key: str, parts: int, part: int, scale: float) -> None:
        """Moves the residual ``key`` (this rank's piece ``part`` of ``parts`` of ``name``'s flat
        elements) into ``name``'s worker residual, times ``scale``; the next route sends it."""
        memory = self.compressor.memory
        piece = memory.pop(key)
        if piece is not None and memory.keeps:
            n = next(shape.numel() for t, shape, _ in self.tensors if t == name)
            lo, hi = chunk_bounds(n, parts)[part]
            worker = memory.buffer(name, torch.empty(n, device=piece.device))
            worker[lo:hi].add_(piece, alpha=scale)

    def fold_released(self, name: str, grad: torch.Tensor) -> None:
        """Adds ``name``'s worker residual to ``grad`` (going dense) once, and drops it."""
        if name in self.release:
            self.release.discard(name)
            residual = self.compressor.memory.pop(name)
            if residual is not None and self.compressor.memory.keeps and residual.numel() == grad.numel():
                grad.add_(residual.view_as(grad).to(grad.dtype))


def _summary(routes: dict[str, str]) -> dict[str, int]:
    """How many tensors take each route."""
    counts: dict[str, int] = {}
    for way in routes.values():
        counts[way] = counts.get(way, 0) + 1
    return counts
