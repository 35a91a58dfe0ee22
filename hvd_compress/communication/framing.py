"""Self-delimiting payloads, so that ranks may send parts of different lengths in one allgather.

Horovod's allgather concatenates the ranks' tensors and returns no split points. Each part
therefore starts with an 8-byte header: the body's length and a tag (a checksum of the
compressor's configuration and the tensor's shape, 31 bits; the sign bit marks a rank whose
gradient held NaN or Inf, which sends no body; an unflagged empty body is a rank without a
gradient for the tensor this step, see base.py). Bodies are padded to 8 bytes so that every
body starts aligned for float32/int32 views. A tag that differs between ranks means the ranks
disagree about what they are sending, which is reported instead of decoded into garbage.
"""
import zlib

import torch

HEADER_BYTES = 8


def tag_of(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF


def _padded(nbytes: int) -> int:
    return (nbytes + 7) // 8 * 8


NON_FINITE = -0x80000000  # the sign bit of the tag word


def frame(body: torch.Tensor, tag: int, finite: bool = True) -> torch.Tensor:
    """header + body + padding, one uint8 tensor on the body's device."""
    out = torch.zeros(HEADER_BYTES + _padded(body.numel()), dtype=torch.uint8, device=body.device)
    header = torch.tensor([body.numel(), tag if finite else tag | NON_FINITE], dtype=torch.int32)
    out[:HEADER_BYTES].copy_(header.view(torch.uint8))
    out[HEADER_BYTES:HEADER_BYTES + body.numel()].copy_(body)
    return out


def unframe(gathered: torch.Tensor, tag: int, parts: int, what: str) -> tuple[list[torch.Tensor], bool]:
    """Splits an allgather result back into the ``parts`` bodies it holds, in rank order, and
    says whether every part came from a finite gradient."""
    headers = gathered if gathered.device.type == "cpu" else None
    bodies = []
    finite = True
    offset = 0
    for rank in range(parts):
        if headers is None:  # one small device-to-host copy per header, not of the payload
            header = gathered[offset:offset + HEADER_BYTES].cpu()
        else:
            header = headers[offset:offset + HEADER_BYTES]
        length, their_tag = (int(v) for v in header.view(torch.int32))
        finite &= their_tag >= 0
        if their_tag & 0x7FFFFFFF != tag:
            raise RuntimeError(
                f"hvd_compress: rank {rank} sent a payload for {what} with a different compressor "
                "configuration or tensor size than this rank; every rank must use the same "
                "compressor, options and model")
        start = offset + HEADER_BYTES
        bodies.append(gathered[start:start + length])
        offset = start + _padded(length)
    if offset != gathered.numel():
        raise RuntimeError(f"hvd_compress: malformed payload for {what}: "
                           f"{gathered.numel() - offset} trailing bytes")
    return bodies, finite
