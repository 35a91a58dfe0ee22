"""The CUDA path on a real GPU, in three parts (run by bench/gpu_check.sh, which builds Horovod
there first):

    python3 bench/gpu_check.py compare OUT   # each compressor: CUDA aggregate vs CPU aggregate
    python3 bench/gpu_check.py time OUT      # CUDA kernels on 25M and 100M fp32 elements
    horovodrun -np N python3 bench/gpu_check.py step OUT   # training steps through Horovod

Each writes a JSON file into OUT. ``compare`` encodes the same gradients as 4 simulated ranks
on CUDA and on the CPU and compares the decoded sums: bitwise for TopK (exact selection) and
AdaComp, within fp32 rounding for OneBit, whose means are summed in another order on the GPU.
``time`` measures compress (finite check, residual add, selection, residual update) and decode
of 4 payloads with CUDA events, medians of 10 after 3 warm-ups, next to torch.topk + gather, a
torch one-bit reference and a device-to-device copy of the same tensor.
"""
import json
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, HERE)

SPECS = ["topk:ratio=0.01,selection=exact", "topk:ratio=0.01", "onebit",
         "onebit:granularity=column", "adacomp"]
RANKS = 4


def _aggregate(spec: str, grads: list[torch.Tensor], steps: int = 3) -> torch.Tensor:
    """The sum a rank decodes after ``steps`` steps of RANKS simulated ranks, one compressor
    (with its residuals) per rank."""
    import hvd_compress as hc
    from hvd_compress.communication.base import contribution

    compressors = [hc.from_spec(spec) for _ in grads]
    for _ in range(steps):
        total = torch.zeros(grads[0].numel(), device=grads[0].device)
        for c, g in zip(compressors, grads):
            acc, _ = contribution(c, "g", g, absent=False)
            c.decode_add(c.encode(acc, g.reshape(-1), g.shape), total, g.shape)
    return total


def compare(out: str) -> None:
    results = {}
    for spec in SPECS:
        gen = torch.Generator().manual_seed(0)
        grads = [torch.randn(512, 1000, generator=gen) for _ in range(RANKS)]
        cpu = _aggregate(spec, grads)
        gpu = _aggregate(spec, [g.cuda() for g in grads]).cpu()
        diff = float((cpu - gpu).abs().max())
        results[spec] = {"max_abs_diff": diff, "bitwise": bool(torch.equal(cpu, gpu)),
                         "max_abs": float(cpu.abs().max())}
        print(f"{spec:40s} bitwise={results[spec]['bitwise']} max diff {diff:.3g}", flush=True)
    _write(out, "gpu_compare.json", results)


def _time_ms(fn, setup=tuple, repeats: int = 10, warmup: int = 3) -> float:
    times = []
    for i in range(warmup + repeats):
        args = setup()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_kernels(out: str) -> None:
    import hvd_compress as hc
    from hvd_compress.communication.base import contribution
    from kernels import torch_onebit, torch_topk

    results = {"device": torch.cuda.get_device_name(), "sizes": {}}
    for n in (25_000_000, 100_000_000):
        grad = torch.randn(n, device="cuda")
        dst = torch.empty_like(grad)
        rows = {"copy_ (device to device)": _time_ms(lambda: dst.copy_(grad)),
                "torch topk 1% + gather": _time_ms(lambda x: torch_topk(x, n // 100),
                                                   lambda: (grad.clone(),)),
                "torch one-bit (masked means)": _time_ms(torch_onebit, lambda: (grad.clone(),))}
        decode = {}
        for label, spec in {"TopK 1% sampled": "topk:ratio=0.01",
                            "TopK 1% exact": "topk:ratio=0.01,selection=exact",
                            "OneBit": "onebit", "AdaComp": "adacomp"}.items():
            c = hc.from_spec(spec)

            def step():
                acc, _ = contribution(c, "g", grad, absent=False)
                return c.encode(acc, grad.reshape(-1), grad.shape)

            rows[label] = _time_ms(step)
            payloads = [step() for _ in range(RANKS)]
            total = torch.zeros(n, device="cuda")

            def aggregate():
                total.zero_()
                for p in payloads:
                    c.decode_add(p, total, grad.shape)

            decode[label] = _time_ms(aggregate)
        results["sizes"][str(n)] = {"compress_ms": rows, "decode_ms": decode}
        for label, ms in rows.items():
            print(f"{n:>11,} {label:32s} {ms:9.3f} ms", flush=True)
        del grad, dst
        torch.cuda.empty_cache()
    _write(out, "gpu_kernels.json", results)


def step(out: str) -> None:
    """A few training steps of ResNet-18 on CUDA tensors through hvd.DistributedOptimizer, with
    each compressor; ranks must end with bitwise-identical parameters."""
    import hashlib

    import horovod.torch as hvd
    import torch.nn.functional as F

    import hvd_compress as hc
    from models import ResNet18

    hvd.init()
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    results = {}
    for spec in ["none", *SPECS, "onebit:communication=twophase"]:
        torch.manual_seed(0)
        model = ResNet18().cuda()
        optimizer = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters(),
            compression=hc.from_spec(spec))
        gen = torch.Generator().manual_seed(hvd.rank())
        for _ in range(3):
            x = torch.randn(16, 3, 32, 32, generator=gen).cuda()
            y = torch.randint(0, 10, (16,), generator=gen).cuda()
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        digest = hashlib.sha256()
        for t in model.state_dict().values():
            digest.update(t.detach().cpu().contiguous().numpy().tobytes())
        results[spec] = {"finite": all(bool(p.isfinite().all()) for p in model.parameters()),
                         "digest": digest.hexdigest()}
        print(f"rank {hvd.rank()} {spec:40s} ok", flush=True)
    _write(out, f"gpu_step_np{hvd.size()}_rank{hvd.rank()}.json", results)


def _write(out: str, name: str, data: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name), "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    {"compare": compare, "time": time_kernels, "step": step}[sys.argv[1]](sys.argv[2])
