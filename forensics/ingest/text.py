"""Read an input file's bytes safely: decompress, bound, decode. Never raise on content.

Truncated gzip/zstd streams (a job killed mid-write) yield what could be recovered plus
a problem string; invalid UTF-8 is replaced, not fatal. Files are read whole but under
a byte cap, so a hostile "log" cannot exhaust memory.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import zstandard

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_DECOMPRESSED_BYTES = 4 << 30  # 4 GiB of text per file read whole is already far past any rank log
MAX_STREAMED_BYTES = 64 << 30  # a plain file read in pieces costs time, not memory: a whole job's console fits
ZSTD_FEED = 16 << 10


@dataclass(frozen=True)
class Payload:
    data: bytes
    problem: str | None = None  # set when only part of the file could be read


def compression_of(head: bytes) -> str | None:
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


def _gunzip(raw: bytes, limit: int) -> Payload:
    out = bytearray()
    data = raw
    while data:
        decoder = zlib.decompressobj(wbits=31)
        try:
            out += decoder.decompress(data, limit - len(out))
        except zlib.error as exc:
            return Payload(bytes(out), f"corrupt gzip data after {len(out)} bytes ({exc})")
        if decoder.unconsumed_tail:
            return Payload(bytes(out), f"decompressed size exceeds {limit} bytes; rest not read")
        if not decoder.eof:
            return Payload(bytes(out), f"truncated gzip stream after {len(out)} bytes")
        data = decoder.unused_data  # concatenated gzip members (e.g. appended rotations)
    return Payload(bytes(out))


def _unzstd(raw: bytes, limit: int) -> Payload:
    # Fed in small slices so one slice cannot expand far past `limit` (zstd can reach
    # ~32,000:1), and frame by frame so a frame cut short is noticed: zstandard's
    # stream_reader ends quietly at a truncated frame.
    out = bytearray()
    data = memoryview(raw)
    start = 0
    while start < len(data):
        decoder = zstandard.ZstdDecompressor().decompressobj()
        fed = start
        try:
            while not decoder.eof and fed < len(data) and len(out) < limit:
                out += decoder.decompress(data[fed : fed + ZSTD_FEED])
                fed += ZSTD_FEED
        except zstandard.ZstdError as exc:
            return Payload(bytes(out[:limit]), f"corrupt zstd data after {len(out)} bytes ({exc})")
        if len(out) >= limit:
            return Payload(bytes(out[:limit]), f"decompressed size exceeds {limit} bytes; rest not read")
        if not decoder.eof:
            return Payload(bytes(out), f"truncated zstd stream after {len(out)} bytes")
        start = min(fed, len(data)) - len(decoder.unused_data)  # next frame (concatenated frames)
    return Payload(bytes(out))


def read_bytes(path: Path, limit: int = MAX_DECOMPRESSED_BYTES) -> Payload:
    """The file's content, decompressed when it is gzip or zstd (by magic, not by name)."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        # read() sized by fstat is 5x faster than read(n) with a large n (no oversized buffer)
        raw = handle.read() if 0 < size <= limit else handle.read(limit + 1)
    raw = raw[: limit + 1]
    too_big = f"file exceeds {limit} bytes; rest not read"
    kind = compression_of(raw[:4])
    if kind is None:
        return Payload(raw[:limit], too_big) if len(raw) > limit else Payload(raw)
    payload = _gunzip(raw, limit) if kind == "gzip" else _unzstd(raw, limit)
    if len(raw) > limit and payload.problem:
        # We cut the compressed bytes ourselves: the stream is not truncated, the file is too big.
        return Payload(payload.data, too_big)
    return payload


def is_compressed(path: Path) -> bool:
    """Whether the file is gzip or zstd, by its magic bytes."""
    with path.open("rb") as handle:
        return compression_of(handle.read(4)) is not None


def read_chunks(path: Path, size: int, limit: int = MAX_STREAMED_BYTES) -> Iterator[tuple[bytes, bool]]:
    """A plain file's first `limit` bytes in pieces of about `size` that end at a newline,
    each with whether it is the last. A line longer than a piece is cut where the piece ends."""
    with path.open("rb") as handle:
        total = min(os.fstat(handle.fileno()).st_size, limit)
        done, carry = 0, b""
        while True:
            block = handle.read(min(size, total - done)) if done < total else b""
            done += len(block)
            data = carry + block
            if not block or done >= total:  # the end (or the file shrank while we read it)
                yield data, True
                return
            cut = data.rfind(b"\n") + 1 or len(data)
            carry = data[cut:]
            yield data[:cut], False


def read_head(path: Path, size: int = 64 << 10) -> bytes:
    """The first `size` bytes of content (decompressed), for sniffing the kind of a file."""
    with path.open("rb") as handle:
        raw = handle.read(size)
    kind = compression_of(raw[:4])
    if kind == "gzip":
        try:
            return zlib.decompressobj(wbits=31).decompress(raw, size)
        except zlib.error:
            return b""
    if kind == "zstd":
        try:
            return zstandard.ZstdDecompressor().stream_reader(raw).read(size)
        except zstandard.ZstdError:
            return b""
    return raw


def looks_binary(head: bytes) -> bool:
    """Mostly control bytes or invalid UTF-8 in the head: not a log.

    NUL bytes alone do not decide it: a node that crashes mid-write leaves zero-filled
    blocks inside a perfectly good log. Random or packed data fails on the rest: it is
    full of control bytes and byte sequences that are not UTF-8.
    """
    sample = head[:8192]
    if not sample:
        return False
    text = sample.replace(b"\x00", b"")
    if not text:
        return True  # only zeros
    controls = sum(1 for b in text if b < 32 and b not in (9, 10, 12, 13, 27))
    invalid = text[:-3].decode("utf-8", errors="replace").count("\ufffd")  # a cut char at the end is fine
    return (controls + invalid) > 0.1 * len(text)


def decode(data: bytes) -> tuple[str, int]:
    """UTF-8 text with invalid sequences replaced, and how many were replaced."""
    text = data.decode("utf-8", errors="replace")
    return text, text.count("\ufffd") - data.count(b"\xef\xbf\xbd")
