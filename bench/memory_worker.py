"""One rank of bench/memory.py: a few training steps of one large nn.Linear under
hvd.DistributedOptimizer with one method, and the rank's resident memory while they run.

    MALLOC_MMAP_THRESHOLD_=1048576 .venv/bin/horovodrun -np 2 -H localhost:2 --gloo \
        .venv/bin/python bench/memory_worker.py --method topk --out DIR

Writes DIR/rank{R}.json (bench/memory.py says why the malloc setting). What it measures, on
Linux, from /proc/self/status: VmRSS and VmHWM, the high-water mark of the resident set, which
writing "5" to /proc/self/clear_refs resets to the current RSS. Each phase of a step (the
backward pass with the gradient hooks that encode, synchronize() with the collectives and the
decoding, the SGD update; inside them, the functions of the compressed path that
``traced_functions`` names) is a frame: its peak is the high-water mark above the RSS at its
entry, the frames nested in it included; a phase's ``kept`` is the RSS it left behind. Peaks
come from the kernel's own accounting, not from sampling, so no short-lived buffer is missed;
torch's, numpy's and Numba's allocations all count, Horovod's too.

Before the measured model, the same method trains a model of the same size, on the same data,
for two steps with a compressor of its own, which is then freed: the Numba kernels the steps
call are compiled or loaded (compiling keeps tens of MB; which kernels run depends on the data
and the size) and Horovod's buffers exist, so the measured steps see what the layer costs.
The residuals and other state of the measured compressor are allocated in its first step, so
the peak counts them.

The data: the loss is linear in the layer's output, ``(model(x) * t).sum() / batch``, so the
weight's gradient is ``t^T x / batch`` whatever the weights (a few steps cannot diverge). Rank 1
draws x and t Gaussian. Rank 0's x is sparse, as a bag-of-words input: each sample has ``active``
features set to 1 (default: at most 0.5% of the columns nonzero over the batch), so under 1%
of its gradient is nonzero and TopK's sampled selection (at most 0.8k candidates) falls back to
the exact one on rank 0 every step, whatever its strided sample draws: the data-dependent
fallback issue 30 reports. The exact selections are counted (``exact_selections``).

Routes are planned for a 1 Gbit/s link (``HVD_COMPRESS_LINK_GBIT=1`` unless set), so every
measured step takes the method's compressed route (``routes`` in the report); told no link rate,
``communication="auto"`` would spend the first steps sending dense and trying routes.
"""
import argparse
import ctypes
import gc
import json
import os
import resource
import threading
from contextlib import contextmanager, nullcontext

import horovod.torch as hvd
import torch

import hvd_compress
from hvd_compress.communication import allgather, codec, framing, lowrank
from hvd_compress.compressor import Compressor
from hvd_compress.kernels import arrays, momentum_cpu, topk_cpu

MB = 1 << 20


def status() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process, bytes."""
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                found[key] = int(value.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def reset_peak() -> None:
    """Sets VmHWM to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def trim() -> None:
    """Hands freed heap memory back to the kernel, so that the measured steps start from the
    RSS of what is alive."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


class Tracer:
    """Nested frames, each with the peak RSS above its entry (see the module docstring). Only
    the main thread's calls are frames (on the CPU the gradient hooks run there too)."""

    def __init__(self) -> None:
        self.stack: list[list] = []  # [label, rss at entry, highest RSS seen so far]
        self.phases: dict[str, dict] = {}
        self.steps: list[dict] = []
        self.main = threading.main_thread()

    def _enter(self, label: str) -> None:
        rss, hwm = status()
        if self.stack:
            self.stack[-1][2] = max(self.stack[-1][2], hwm)
        reset_peak()
        self.stack.append([label, rss, rss])

    def _exit(self) -> tuple[int, int, int]:
        rss, hwm = status()
        label, entry, seen = self.stack.pop()
        peak = max(seen, hwm)
        if self.stack:
            self.stack[-1][2] = max(self.stack[-1][2], peak)
        reset_peak()
        phase = self.phases.setdefault(label, {"calls": 0, "peak_mb": 0.0, "kept_mb": 0.0})
        phase["calls"] += 1
        phase["peak_mb"] = max(phase["peak_mb"], (peak - entry) / MB)
        phase["kept_mb"] = max(phase["kept_mb"], (rss - entry) / MB)
        return entry, peak, rss

    @contextmanager
    def phase(self, label: str):
        if threading.current_thread() is not self.main:
            yield
            return
        self._enter(label)
        try:
            yield
        finally:
            self._exit()

    def step(self, run) -> None:
        self._enter("step")
        try:
            run()
        finally:
            entry, peak, rss = self._exit()
            self.steps.append({"rss_before": entry, "peak_rss": peak, "rss_after": rss})

    def wrap(self, owner, attribute: str, label: str) -> None:
        original = getattr(owner, attribute)

        def traced(*args, **kwargs):
            with self.phase(label):
                return original(*args, **kwargs)

        setattr(owner, attribute, traced)


def traced_functions(compressor) -> list[tuple[object, str, str]]:
    """(owner, attribute, label) of what ``Tracer`` frames: the compressed path's stages, those
    of them that exist in this version of the package (it is edited under the bench)."""
    step = next((v for v in vars(lowrank).values()
                 if isinstance(v, type) and hasattr(v, "start_phase2")), None)
    functions = [(allgather, "compressed", "encode: fold + select (communication/codec.py compressed)"),
                 (arrays, "join", "encode: join the parts (kernels/arrays.py join)"),
                 (framing, "frame", "frame the payload (communication/framing.py frame)"),
                 (hvd, "synchronize", "wait: collective output (hvd.synchronize)"),
                 (framing, "unframe", "unframe (communication/framing.py unframe)"),
                 (codec, "output_for", "aggregate buffer (communication/codec.py output_for)"),
                 (codec, "decode_sum", "decode + sum (communication/codec.py decode_sum)"),
                 (topk_cpu, "topk_exact", "topk: exact selection (kernels/topk_cpu.py topk_exact)"),
                 (topk_cpu, "_cut", "topk: cut to k (kernels/topk_cpu.py _cut)"),
                 (momentum_cpu, "accumulate", "momentum (kernels/momentum_cpu.py accumulate)"),
                 (step, "__init__", "powersgd: fold, P = M Q (communication/lowrank.py)"),
                 (step, "start_phase2", "powersgd: QR, Q_i = M^T P^, residual (communication/lowrank.py)"),
                 (step, "result", "powersgd: aggregate P^ Q^T (communication/lowrank.py)")]
    if isinstance(compressor, Compressor):
        kind = type(compressor)
        functions += [(kind, "fold_encode", f"{kind.__name__}.fold_encode"),
                      (kind, "encode", f"{kind.__name__}.encode")]
    return [f for f in functions if f[0] is not None and hasattr(f[0], f[1])]


class Data:
    """A batch for this rank (see the module docstring)."""

    def __init__(self, rank: int, batch: int, sparse: bool, active: int | None) -> None:
        self.batch, self.sparse = batch, sparse
        self.generator = torch.Generator().manual_seed(1000 + rank)
        self.active = active

    def __call__(self, cols: int, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.generator
        t = torch.randn(self.batch, rows, generator=g)
        if not self.sparse:
            return torch.randn(self.batch, cols, generator=g), t
        active = self.active or max(1, cols // (200 * self.batch))
        x = torch.zeros(self.batch, cols)
        x.scatter_(1, torch.randint(0, cols, (self.batch, active), generator=g), 1.0)
        return x, t


def train(model, optimizer, data: Data, tracer: Tracer | None) -> None:
    """One step: backward (the hooks encode and start the collectives), synchronize() (wait,
    decode), the SGD update; each a frame when ``tracer`` is given."""
    x, t = data(model.in_features, model.out_features)
    phase = tracer.phase if tracer else (lambda label: nullcontext())

    def run() -> None:
        optimizer.zero_grad()
        with phase("backward (hooks: encode, start collectives)"):
            ((model(x) * t).sum() / x.shape[0]).backward()
        with phase("synchronize (wait, decode)"):
            optimizer.synchronize()
        with phase("SGD update"):
            with optimizer.skip_synchronize():
                optimizer.step()

    tracer.step(run) if tracer else run()


def distributed(model, spec: str, lr: float):
    compressor = hvd_compress.from_spec(spec)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0)
    return compressor, hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                                compression=compressor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", required=True, help="a from_spec string, none or fp16 included")
    parser.add_argument("--rows", type=int, default=5000, help="out_features")
    parser.add_argument("--cols", type=int, default=10000, help="in_features")
    parser.add_argument("--steps", type=int, default=6, help="measured steps")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--sparse-rank", type=int, default=0, help="the rank with sparse input (-1: none)")
    parser.add_argument("--active", type=int, default=None, help="features set per sample there")
    parser.add_argument("--out", required=True, help="folder for rank{R}.json")
    args = parser.parse_args()

    # Routes planned for a 1 Gbit/s link, so that every measured step takes the method's own
    # route: communication="auto" told no link rate spends its first steps on dense and trial
    # routes instead (communication/planner.py). The routes taken are reported.
    os.environ.setdefault("HVD_COMPRESS_LINK_GBIT", "1")
    hvd.init()
    torch.set_num_threads(1)  # the two ranks share this machine's cores
    torch.manual_seed(0)
    rank = hvd.rank()
    data = Data(rank, args.batch_size, rank == args.sparse_rank, args.active)
    selections = {"exact": 0}
    exact = topk_cpu.topk_exact

    def counted(acc, k):
        selections["exact"] += 1
        return exact(acc, k)

    topk_cpu.topk_exact = counted
    framed = {"max": 0}
    frame = framing.frame

    def measured(body, *args, **kwargs):
        payload = frame(body, *args, **kwargs)
        framed["max"] = max(framed["max"], payload.numel())
        return payload

    framing.frame = measured

    # warm-up: the same method and data on a model of the same size, with its own compressor,
    # so that every kernel the measured steps call is compiled or loaded (the paths taken
    # depend on the data and the size); then all of it is freed
    warm = torch.nn.Linear(args.cols, args.rows)
    _, optimizer = distributed(warm, args.method, args.lr)
    for _ in range(args.warmup_steps):
        train(warm, optimizer, data, None)
    del warm, optimizer, _
    selections["exact"] = framed["max"] = 0

    model = torch.nn.Linear(args.cols, args.rows)
    compressor, optimizer = distributed(model, args.method, args.lr)
    tracer = Tracer()
    for owner, attribute, label in traced_functions(compressor):
        tracer.wrap(owner, attribute, label)
    hvd.allreduce(torch.zeros(1), name="memory_worker.barrier")
    trim()
    base, _ = status()
    for _ in range(args.steps):
        train(model, optimizer, data, tracer)
    hvd.allreduce(torch.zeros(1), name="memory_worker.barrier.end")

    stats = compressor.stats() if isinstance(compressor, Compressor) else None
    weight = (stats or {}).get("per_tensor", {}).get("weight")
    report = {
        "rank": rank, "size": hvd.size(), "method": args.method,
        "sparse_input": rank == args.sparse_rank,
        "numel": model.weight.numel(), "gradient_bytes": 4 * model.weight.numel(),
        "base_rss": base,
        "peak_rss": max(s["peak_rss"] for s in tracer.steps),
        "rss_after_first_step": tracer.steps[0]["rss_after"],
        "rss_end": status()[0],
        "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "steps": tracer.steps,
        "phases": tracer.phases,
        "exact_selections": selections["exact"],
        # the largest framed payload of a step (allgather), else the mean (PowerSGD's factors)
        "payload_bytes_per_step": framed["max"] or (weight and weight["sent_bytes"] / stats["steps"]),
        "routes": dict(getattr(optimizer._hvd_compress, "routes", {})),
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
    }
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
