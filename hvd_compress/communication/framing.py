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
    end = HEADER_BYTES + body.numel()
    out = torch.empty(HEADER_BYTES + _padded(body.numel()), dtype=torch.uint8, device=body.device)
    header = torch.tensor([body.numel(), tag if finite else tag | NON_FINITE], dtype=torch.int32)
    out[:HEADER_BYTES].copy_(header.view(torch.uint8))
    out[HEADER_BYTES:end].copy_(body)
    out[end:].zero_()  # the padding: the payload's bytes are all defined
    return out


def headers(buffer: torch.Tensor, count: int, what: str) -> list[tuple[int, int, int]]:
    """(body offset, body length, tag word) of the ``count`` frames ``buffer`` holds back to back."""
    host = buffer if buffer.device.type == "cpu" else None
    found, offset = [], 0
    for _ in range(count):
        if host is None:  # one small device-to-host copy per header, not of the payload
            header = buffer[offset:offset + HEADER_BYTES].cpu()
        else:
            header = host[offset:offset + HEADER_BYTES]
        length, word = (int(v) for v in header.view(torch.int32))
        if length < 0 or offset + HEADER_BYTES + length > buffer.numel():
            raise RuntimeError(f"hvd_compress: malformed payload for {what}: frame {len(found)} "
                               f"says {length} bytes, {buffer.numel() - offset - HEADER_BYTES} remain")
        found.append((offset + HEADER_BYTES, length, word))
        offset += HEADER_BYTES + _padded(length)
    if offset != buffer.numel():
        raise RuntimeError(f"hvd_compress: malformed payload for {what}: "
                           f"{buffer.numel() - offset} trailing bytes")
    return found


def bodies(buffer: torch.Tensor, found: list[tuple[int, int, int]], tag: int,
           what: str) -> tuple[list[torch.Tensor], bool]:
    """The bodies of the frames ``found`` (one per rank, in rank order) and whether every one
    came from a finite gradient; a tag other than ``tag`` is reported, not decoded."""
    for rank, (_, _, word) in enumerate(found):
        if word & 0x7FFFFFFF != tag:
            raise RuntimeError(
                f"hvd_compress: rank {rank} sent a payload for {what} with a different compressor "
                "configuration or tensor size than this rank; every rank must use the same "
                "compressor, options and model")
    return ([buffer[start:start + length] for start, length, _ in found],
            all(word >= 0 for _, _, word in found))


def unframe(gathered: torch.Tensor, tag: int, parts: int, what: str) -> tuple[list[torch.Tensor], bool]:
    """Splits an allgather result back into the ``parts`` bodies it holds, in rank order, and
    says whether every part came from a finite gradient."""
    return bodies(gathered, headers(gathered, parts, what), tag, what)
