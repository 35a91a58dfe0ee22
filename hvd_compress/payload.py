"""What decoding checks in a payload another rank sent: ``PayloadError`` and the length checks
the methods share.

A payload is another process's bytes: a buggy rank or a flipped bit can make it anything, and
the frame (communication/framing.py) checks its length field and its configuration tag, not its
content. Every method's ``decode_add``/``decode_add_all`` therefore checks, before it reads or
writes anything, that the payload's length is one its encoder can produce for ``out`` (exactly,
for a fixed layout; a header plus whole entries, at most as many as ``out`` has elements, where
the count varies), and its kernels check every index a payload carries against ``out``'s size,
skipping and counting those outside it. Either finding raises ``PayloadError``;
``communication.base.decode_sum`` names the rank that sent the payload and the tensor. What
cannot be checked is left as it is: a flipped value, scale or sign bit decodes to another
number, as it would in any float.
"""
import torch

from .kernels import arrays


class PayloadError(ValueError):
    """A payload that cannot be what this compressor's ``encode`` made for the ``out`` it is
    decoded into: a length no encode makes, or an index outside ``out``."""


def exact_length(payload: torch.Tensor, want: int, out: torch.Tensor) -> None:
    """Raises PayloadError unless ``payload`` is ``want`` bytes long (a fixed layout)."""
    if payload.numel() != want:
        raise PayloadError(f"{payload.numel()} bytes, where its payload for {out.numel()} "
                           f"elements is {want} bytes")


def entry_count(payload: torch.Tensor, head: int, width: int, out: torch.Tensor) -> int:
    """How many ``width``-byte entries follow the ``head``-byte header of ``payload``; raises
    PayloadError unless the bytes are that header and whole entries, at most one for each
    element of ``out``."""
    count, rest = divmod(payload.numel() - head, width)
    if count < 0 or rest or count > out.numel():
        raise PayloadError(f"{payload.numel()} bytes, where its payload for {out.numel()} "
                           f"elements is {head} + {width} bytes an entry, at most "
                           f"{out.numel()} entries")
    return count


def indices_inside(bad: int, out: torch.Tensor) -> None:
    """Raises PayloadError when a decode kernel reports ``bad`` > 0 indices outside ``out``
    (which it skipped: the rest of the payload is added)."""
    if bad:
        raise PayloadError(f"{bad} indices outside the {out.numel()} elements decoded into "
                           "(skipped)")


def add_pairs(payload: torch.Tensor, head: int, out: torch.Tensor) -> None:
    """Adds the (value, index) pairs that follow ``head`` header bytes of ``payload`` to
    ``out``: c float32 values, then c int32 indices (TopK's payload; Threshold's and DGC's
    too). Raises PayloadError for a length that is not the header and whole pairs, at most one
    per element of ``out``, or for an index outside ``out`` (kernels/sparse_cpu.py)."""
    count = entry_count(payload, head, 8, out)
    if count:  # no zero-length device arrays through __cuda_array_interface__
        values = payload[head:head + 4 * count].view(torch.float32)
        indices = payload[head + 4 * count:].view(torch.int32)
        indices_inside(arrays.kernels("sparse", out).scatter_add(values, indices, out), out)
