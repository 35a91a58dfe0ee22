"""Dense fp32 allreduce, for the gradients of an hvd_compress optimizer that go uncompressed
(small ones, or routed dense by route.py) and whose dtype Horovod cannot reduce itself.

Horovod 0.28.1's CPU allreduce has no bfloat16 ("Tensor type torch.BFloat16Tensor is not
supported"), so a bf16 model's biases and norm layers, which go dense, would fail at the first
backward. They travel as fp32 instead (twice the bytes of bf16) and come back in bf16. Cost:
one fused allreduce, as Horovod's own dense path.
"""
import horovod.torch as hvd
import torch

from .base import Exchange, Wait

#: dtypes Horovod's allreduce refuses, sent as fp32
WIDENED = (torch.bfloat16,)


def start(grad: torch.Tensor, name: str, exchange: Exchange) -> Wait:
    op = hvd.Average if exchange.average else hvd.Sum
    handle = hvd.allreduce_async(grad.to(torch.float32), name=exchange.name(name, ".fp32"), op=op,
                                 process_set=exchange.process_set)
    return Wait(lambda: hvd.synchronize(handle).to(grad.dtype), name)
