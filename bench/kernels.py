"""Kernel speed: each compressor's compress + residual update (the finite check included), and
decompress + aggregate, side by side with straightforward torch versions and the
memory-bandwidth floor (a preallocated ``copy_`` of the same tensor), in one run on this machine.

    .venv/bin/python bench/kernels.py            # 1M and 25M fp32 elements
    .venv/bin/python bench/kernels.py --quick    # 1M only
    .venv/bin/python bench/kernels.py --only adacomp   # copy_ and AdaComp only; writes nothing

Writes bench/results/kernels.json (medians in ms, and ratios) and kernels.png;
``bench/report.py`` turns it into the README table.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hvd_compress as hc  # noqa: E402
from common import RESULTS, machine  # noqa: E402
from hvd_compress.communication import framing  # noqa: E402
from hvd_compress.communication.base import compressed, decode_sum  # noqa: E402
from hvd_compress.kernels import quantize, threads  # noqa: E402
from hvd_compress.memory import fold  # noqa: E402

AGGREGATED_RANKS = 4  # decode + aggregate sums this many payloads


def median_ms(fn, setup, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):  # the first run compiles and warms caches
        args = setup()
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[1:])


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
    grad = torch.randn(n, generator=torch.Generator().manual_seed(0))
    dst = torch.empty_like(grad)
    rows = {}
    rows["copy_ (bandwidth floor)"] = median_ms(lambda: dst.copy_(grad), tuple, repeats)
    compressors = {"TopK 1% sampled": hc.TopK(0.01), "TopK 1% exact": hc.TopK(0.01, selection="exact"),
                   "OneBit": hc.OneBit(), "AdaComp": hc.AdaComp(), "QSGD": hc.QSGD(),
                   "TernGrad": hc.TernGrad(), "u8bit": hc.U8Bit(), "Natural": hc.Natural()}
    if only is None:
        rows |= torch_rows(grad, repeats)
    else:
        compressors = {label: c for label, c in compressors.items() if only.lower() in label.lower()}
    decode = {}
    rows |= compress_rows(compressors, grad, repeats, decode)
    return {"compress_ms": rows, "decode_ms": decode}


def torch_rows(grad: torch.Tensor, repeats: int) -> dict:
    """The torch versions and the fused finite check + add, against which ours are read."""
    k = int(0.01 * grad.numel())
    rows = {}
    rows["torch topk 1% + gather"] = median_ms(lambda x: torch_topk(x, k), lambda: (grad.clone(),), repeats)
    rows["torch one-bit (masked means)"] = median_ms(torch_onebit, lambda: (grad.clone(),), repeats)
    for label, fn in {"torch QSGD (bucket norms, int8)": torch_qsgd, "torch TernGrad (int8)": torch_terngrad,
                      "torch u8bit (bucketize)": torch_u8bit, "torch natural (frexp)": torch_natural}.items():
        rows[label] = median_ms(fn, lambda: (grad.clone(),), repeats)
    residual = torch.zeros_like(grad)
    rows["finite check + add, torch"] = median_ms(lambda: torch_compensate(residual, grad), tuple, repeats)
    rows["finite check + add, fused"] = median_ms(lambda: fold(residual, grad, True), tuple, repeats)
    with serial_kernels():
        rows["finite check + add, fused, serial build"] = median_ms(
            lambda: fold(residual, grad, True), tuple, repeats)
    return rows


def compress_rows(compressors: dict, grad: torch.Tensor, repeats: int, decode: dict) -> dict:
    """Each compressor's step in the default and the serial kernel builds; fills ``decode``
    with the decode + sum of ``AGGREGATED_RANKS`` of its payloads and their size."""
    n = grad.numel()
    rows = {}
    for label, compressor in compressors.items():
        run = ours(compressor, grad)
        rows[label] = median_ms(run, tuple, repeats)
        with serial_kernels():
            rows[label + ", serial build"] = median_ms(run, tuple, repeats)
        payloads = [run() for _ in range(AGGREGATED_RANKS)]
        # as an allgather hands them over: views of one buffer, all decoded by one call
        bodies, _ = framing.unframe(torch.cat([framing.frame(p, 0) for p in payloads]), 0,
                                    AGGREGATED_RANKS, label)
        out = torch.zeros(n)

        def aggregate():
            out.zero_()
            decode_sum(compressor, bodies, out, grad.shape)

        decode[label] = median_ms(aggregate, tuple, repeats)
        decode[label + " payload bytes"] = payloads[0].numel()
    return rows


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
              "aggregated_ranks": AGGREGATED_RANKS, "sizes": {}}
    for n in sizes:
        print(f"{n:,} elements ...", flush=True)
        result["sizes"][str(n)] = r = bench_size(n, args.repeats, args.only)
        floor = r["compress_ms"]["copy_ (bandwidth floor)"]
        for label, ms in r["compress_ms"].items():
            print(f"  {label:32s} {ms:9.2f} ms  {ms / floor:6.1f}x copy_")
        for label, value in r["decode_ms"].items():
            print(f"  decode+sum {label:32s} {value:12.2f}")
    if args.only is not None:  # a partial table must not replace the README's source
        return
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "kernels.json"), "w") as f:
        json.dump(result, f, indent=1)
    import plots

    print("wrote", *plots.kernels(result))


if __name__ == "__main__":
    main()
