"""Kernel speed: each compressor's compress + residual update (the finite check included), and
decompress + aggregate, side by side with straightforward torch versions and the
memory-bandwidth floor (a preallocated ``copy_`` of the same tensor), in one run on this machine.

    .venv/bin/python bench/kernels.py            # 1M and 25M fp32 elements
    .venv/bin/python bench/kernels.py --quick    # 1M only
    .venv/bin/python bench/kernels.py --only adacomp   # copy_ and AdaComp only; writes nothing

Writes bench/results/kernels.json (medians in ms, and ratios) and kernels.png;
``bench/report.py`` turns it into the table in docs/benchmarks.md.

How it times, so that a fresh clone, or a busy moment, reads the same ratios: every kernel is
first called in both builds (Numba compiles it, or loads it from its cache, and its memory is
touched); then each of ``--repeats`` timed calls follows a ``copy_`` of the same size, timed
too, so that ``copy_`` and the kernel see the same load and the same state of the machine. A
row is the median of its calls, ``x copy_`` the median of its calls' ratios to the ``copy_``
just before each, and the ``copy_`` row the median of every such ``copy_`` at that size. The
page faults per call (a kernel that allocates gradient-sized memory each call pays them) and
the load average before and after each size are recorded with the machine, Numba's threading
layer and the CPU LLVM compiled for: what to compare first when two runs disagree.
"""
import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import time

import numba
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hvd_compress as hc  # noqa: E402
from common import RESULTS, machine  # noqa: E402
from hvd_compress.communication import framing  # noqa: E402
from hvd_compress.communication.base import compressed, decode_sum  # noqa: E402
from hvd_compress.kernels import quantize, threads  # noqa: E402
from hvd_compress.memory import fold  # noqa: E402

AGGREGATED_RANKS = 4  # decode + aggregate sums this many payloads
BUSY_LOAD = 1.0  # a 1-minute load average above this on entry: another process shares the cores


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class Timer:
    """Times calls interleaved with the bandwidth floor ``floor`` (a ``copy_`` of the same
    size): each timed call follows a timed floor call. Keeps, per label, the median ms, the
    median ratio to the floor call before it, the floor's median and the page faults per call;
    and every floor sample."""

    def __init__(self, floor, repeats: int) -> None:
        self.floor, self.repeats = floor, repeats
        self.ms, self.vs_copy, self.copy_ms, self.faults = {}, {}, {}, {}
        self.floor_samples: list[float] = []

    def time(self, label: str, fn, setup=tuple, warm: int = 1) -> float:
        for _ in range(warm):  # compiles (or loads from Numba's cache) and touches memory
            fn(*setup())
        ms, floors, faults = [], [], []
        for _ in range(self.repeats):
            start = time.perf_counter()
            self.floor()
            floors.append(time.perf_counter() - start)
            args = setup()
            before = _faults()
            start = time.perf_counter()
            fn(*args)
            ms.append(time.perf_counter() - start)
            faults.append(_faults() - before)
        self.floor_samples += floors
        self.ms[label] = 1e3 * statistics.median(ms)
        self.vs_copy[label] = statistics.median(t / f for t, f in zip(ms, floors))
        self.copy_ms[label] = 1e3 * statistics.median(floors)
        self.faults[label] = statistics.median(faults)
        return self.ms[label]

    def floor_ms(self) -> float:
        return 1e3 * statistics.median(self.floor_samples)


def environment() -> dict:
    """What makes two runs of this bench differ, besides the code."""
    import llvmlite.binding

    from hvd_compress.kernels import compensate_cpu

    compensate_cpu._add.parallel(torch.zeros(2).numpy(), torch.zeros(2).numpy())  # starts Numba's pool
    return {"numba": numba.__version__, "threading_layer": numba.threading_layer(),
            "numba_threads": numba.config.NUMBA_NUM_THREADS, "llvm_cpu": llvmlite.binding.get_host_cpu_name(),
            "torch": torch.__version__,
            "env": {k: v for k, v in os.environ.items() if k.startswith(("NUMBA_", "OMP_", "OPENBLAS_", "MKL_",
                                                                            "MALLOC_"))}}


def torch_topk(x: torch.Tensor, k: int) -> None:
    indices = torch.topk(x.abs(), k, sorted=False).indices
    values = x.gather(0, indices)
    x.index_fill_(0, indices, 0.0)  # the residual update
    return values, indices


def torch_onebit(x: torch.Tensor) -> None:
    mask = x >= 0
    high, low = x[mask].mean(), x[~mask].mean()
    bits = mask.to(torch.uint8)  # one byte per element, as GRACE sends
    x.sub_(torch.where(mask, high, low))
    return bits, low, high


def _buckets(x: torch.Tensor, bucket: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, (-x.numel()) % bucket)).view(-1, bucket)


def torch_qsgd(x: torch.Tensor, levels: int = 127, bucket: int = 512) -> None:
    """QSGD in torch: bucket norms, stochastic levels as int8, the residual update."""
    v = _buckets(x, bucket)
    norms = v.norm(dim=1, keepdim=True)
    level = (v.abs() * (levels / norms.clamp_min(1e-30)) + torch.rand_like(v)).floor_().clamp_(max=levels)
    codes = (level * v.sign()).to(torch.int8)
    x.sub_((codes * (norms / levels)).view(-1)[:x.numel()])
    return norms, codes


def torch_terngrad(x: torch.Tensor) -> None:
    """TernGrad in torch: one byte per entry (unpacked), the residual update."""
    s = x.abs().max()
    codes = ((torch.rand_like(x) * s < x.abs()) * x.sign()).to(torch.int8)
    x.sub_(codes * s)
    return s, codes


def torch_u8bit(x: torch.Tensor, bucket: int = 512) -> None:
    """u8bit in torch: bucket max, nearest dynamic-tree value by bucketize, the residual update."""
    table = torch.from_numpy(quantize.dynamic_magnitudes()).float()
    v = _buckets(x, bucket)
    scale = v.abs().amax(dim=1, keepdim=True)
    code = torch.bucketize(v.abs() / scale, (table[1:] + table[:-1]) / 2)
    codes = (code * v.sign()).to(torch.int8)
    x.sub_((table[code] * scale * v.sign()).view(-1)[:x.numel()])
    return scale, codes


def torch_natural(x: torch.Tensor) -> None:
    """Natural compression in torch: stochastic power-of-two rounding, the residual update."""
    mantissa, exponent = torch.frexp(x)
    exponent = exponent - 1 + (torch.rand_like(x) < 2 * mantissa.abs() - 1)
    codes = ((exponent.max() + 1 - exponent).clamp_(max=127) * x.sign()).to(torch.int8)
    x.sub_(torch.ldexp(x.sign(), exponent))
    return exponent.max(), codes


def ours(compressor: hc.Compressor, grad: torch.Tensor):
    """One step of ours, as the hook runs it: residual += grad with the finite check, compress,
    residual -= what was sent (``compressed``: in one kernel where the method fuses them)."""
    return lambda: compressed(compressor, "g", grad, absent=False)[0][0]


@contextlib.contextmanager
def serial_kernels():
    """Forces the serial builds of the kernels: what a rank that fills its host runs
    (hvd_compress/kernels/threads.py). Without it, arrays of 1M elements or more take the
    parallel builds on this machine's 2 cores."""
    saved = threads.threads_per_rank
    threads.threads_per_rank = lambda: 1
    try:
        yield
    finally:
        threads.threads_per_rank = saved


def torch_compensate(residual: torch.Tensor, grad: torch.Tensor) -> bool:
    """What the hook did before the fused kernel: the finite check and the add, in torch."""
    finite = bool(torch.isfinite(grad).all())
    residual.add_(grad)
    return finite


def bench_size(n: int, repeats: int, only: str | None = None) -> dict:
    """``only``: time copy_ and the compressors whose label holds it (any case), nothing else."""
    load_before = os.getloadavg()[0]
    grad = torch.randn(n, generator=torch.Generator().manual_seed(0))
    dst = torch.empty_like(grad)
    timer = Timer(lambda: dst.copy_(grad), repeats)
    for _ in range(2):  # first touch of dst
        dst.copy_(grad)
    compressors = {"TopK 1% sampled": hc.TopK(0.01), "TopK 1% exact": hc.TopK(0.01, selection="exact"),
                   "OneBit": hc.OneBit(), "AdaComp": hc.AdaComp(), "QSGD": hc.QSGD(),
                   "TernGrad": hc.TernGrad(), "u8bit": hc.U8Bit(), "Natural": hc.Natural()}
    if only is None:
        torch_rows(timer, grad)
    else:
        compressors = {label: c for label, c in compressors.items() if only.lower() in label.lower()}
    decode = {}
    compress_rows(timer, compressors, grad, decode)
    rows = {"copy_ (bandwidth floor)": timer.floor_ms()} | timer.ms
    vs_copy = {"copy_ (bandwidth floor)": 1.0} | timer.vs_copy
    return {"compress_ms": rows, "decode_ms": decode, "vs_copy": vs_copy, "copy_ms": timer.copy_ms,
            "faults_per_call": timer.faults, "load": [load_before, os.getloadavg()[0]]}


def torch_rows(timer: Timer, grad: torch.Tensor) -> None:
    """The torch versions and the fused finite check + add, against which ours are read."""
    k = int(0.01 * grad.numel())
    timer.time("torch topk 1% + gather", lambda x: torch_topk(x, k), lambda: (grad.clone(),))
    timer.time("torch one-bit (masked means)", torch_onebit, lambda: (grad.clone(),))
    for label, fn in {"torch QSGD (bucket norms, int8)": torch_qsgd, "torch TernGrad (int8)": torch_terngrad,
                      "torch u8bit (bucketize)": torch_u8bit, "torch natural (frexp)": torch_natural}.items():
        timer.time(label, fn, lambda: (grad.clone(),))
    residual = torch.zeros_like(grad)
    timer.time("finite check + add, torch", lambda: torch_compensate(residual, grad))
    with serial_kernels():  # both builds warm before either is timed
        fold(residual, grad, True)
    timer.time("finite check + add, fused", lambda: fold(residual, grad, True))
    with serial_kernels():
        timer.time("finite check + add, fused, serial build", lambda: fold(residual, grad, True))


def compress_rows(timer: Timer, compressors: dict, grad: torch.Tensor, decode: dict) -> None:
    """Each compressor's step in the default and the serial kernel builds; fills ``decode``
    with the decode + sum of ``AGGREGATED_RANKS`` of its payloads and their size."""
    n = grad.numel()
    for label, compressor in compressors.items():
        run = ours(compressor, grad)
        with serial_kernels():  # both builds compiled and warm before either is timed
            run()
        timer.time(label, run, warm=2)
        with serial_kernels():
            timer.time(label + ", serial build", run, warm=2)
        payloads = [run() for _ in range(AGGREGATED_RANKS)]
        # as an allgather hands them over: views of one buffer, all decoded by one call
        bodies, _ = framing.unframe(torch.cat([framing.frame(p, 0) for p in payloads]), 0,
                                    AGGREGATED_RANKS, label)
        out = torch.zeros(n)

        def aggregate():
            out.zero_()
            decode_sum(compressor, bodies, out, grad.shape)

        decode[label] = timer.time("decode+sum " + label, aggregate, warm=2)
        del timer.ms["decode+sum " + label], timer.vs_copy["decode+sum " + label]
        decode[label + " payload bytes"] = payloads[0].numel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M elements only")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", metavar="NAME",
                        help="copy_ and the compressors whose label holds NAME (e.g. adacomp); "
                             "prints, writes no results")
    args = parser.parse_args()
    sizes = [1_000_000] if args.quick else [1_000_000, 25_000_000]
    result = {"machine": machine(), "torch_threads": torch.get_num_threads(),
              "aggregated_ranks": AGGREGATED_RANKS, "repeats": args.repeats, "environment": environment(),
              "sizes": {}}
    if os.getloadavg()[0] > BUSY_LOAD:
        print(f"warning: load average {os.getloadavg()[0]:.1f}: another process is using the cores; "
              "the times will be long, the ratios to copy_ less so", flush=True)
    for n in sizes:
        print(f"{n:,} elements ...", flush=True)
        result["sizes"][str(n)] = r = bench_size(n, args.repeats, args.only)
        for label, ms in r["compress_ms"].items():
            faults = r["faults_per_call"].get(label, 0)
            print(f"  {label:40s} {ms:9.2f} ms  {r['vs_copy'][label]:6.1f}x copy_"
                  + (f"  ({faults:.0f} page faults a call)" if faults else ""))
        for label, value in r["decode_ms"].items():
            print(f"  decode+sum {label:40s} {value:12.2f}")
        print(f"  load average {r['load'][0]:.2f} before, {r['load'][1]:.2f} after", flush=True)
    if args.only is not None:  # a partial table must not replace the table's source
        return
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "kernels.json"), "w") as f:
        json.dump(result, f, indent=1)
    import plots

    print("wrote", *plots.kernels(result))


if __name__ == "__main__":
    main()
