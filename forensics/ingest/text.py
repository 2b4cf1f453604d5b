"""Read an input file's bytes safely: decompress, bound, decode. Never raise on content.

Truncated gzip/zstd streams (a job killed mid-write) yield what could be recovered plus
a problem string; invalid UTF-8 is replaced, not fatal. `read_bytes` reads a file whole
under a byte cap; `read_pieces` streams a log of any size, compressed or not, in pieces
of bounded size, so a small archive that inflates to gigabytes costs time, not memory.
"""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_DECOMPRESSED_BYTES = 4 << 30  # 4 GiB of text per file read whole is already far past any rank log
MAX_STREAMED_BYTES = 64 << 30  # a plain file read in pieces costs time, not memory: a whole job's console fits
ZSTD_FEED = 16 << 10
READ_BLOCK = 1 << 20  # compressed bytes read at a time when streaming
INFLATE_BLOCK = 4 << 20  # most decompressed bytes one gzip step may produce
MAX_PIECE_LINES = 1 << 20  # lines per streamed piece: a file of tiny lines costs memory per line, not per byte
ZSTD_STREAM_FEED = 1 << 10  # zstd input per step when streaming: at most ~32 MB out of it


def open_input(path: Path) -> BinaryIO:
    """`path` opened for reading, if it is still a regular file.

    Without blocking and without following a link: a file swapped after discovery for a
    FIFO (whose open would wait forever for a writer), a device or a symbolic link raises
    OSError, like an unreadable file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"not a regular file any more: {path.name}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
    with open_input(path) as handle:
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
    with open_input(path) as handle:
        return compression_of(handle.read(4)) is not None


@dataclass
class Piece:
    """Part of a streamed file: its bytes (ending at a newline unless a line is longer than a
    piece), whether it is the last, the share of the file's stored bytes it came from, and,
    on the last piece, why the rest could not be read (None when all was read)."""

    data: bytes
    last: bool
    share: float
    problem: str | None = None


@dataclass
class _Stream:
    problem: str | None = None
    produced: int = 0


def _plain_blocks(handle: BinaryIO, stream: _Stream, limit: int) -> Iterator[bytes]:
    while block := handle.read(min(READ_BLOCK, limit - stream.produced)):
        stream.produced += len(block)
        yield block
    if stream.produced >= limit and handle.read(1):
        stream.problem = f"file exceeds {limit} bytes; rest not read"


def _gzip_step(decoder: Any, pending: bytes, room: int) -> tuple[bytes, bytes]:
    out = decoder.decompress(pending, min(INFLATE_BLOCK, room))
    return out, decoder.unconsumed_tail


def _zstd_step(decoder: Any, pending: bytes, room: int) -> tuple[bytes, bytes]:
    return decoder.decompress(pending[:ZSTD_STREAM_FEED])[:room], pending[ZSTD_STREAM_FEED:]


# kind -> (a fresh decoder, one bounded step: (output, input left), the error it raises)
_INFLATERS: dict[str, tuple[Callable[[], Any], Callable[[Any, bytes, int], tuple[bytes, bytes]], type[Exception]]] = {
    "gzip": (lambda: zlib.decompressobj(wbits=31), _gzip_step, zlib.error),
    "zstd": (lambda: zstandard.ZstdDecompressor().decompressobj(), _zstd_step, zstandard.ZstdError),
}


def _inflated_blocks(handle: BinaryIO, stream: _Stream, limit: int, kind: str) -> Iterator[bytes]:
    """Decompressed blocks of a gzip or zstd file, each step bounded; concatenated members or
    frames (appended rotations) go on with a fresh decoder; a cut or corrupt stream ends with
    `stream.problem` set."""
    fresh, step, error = _INFLATERS[kind]
    decoder, started, pending = fresh(), False, b""
    while stream.produced < limit:
        if not pending and not (pending := handle.read(READ_BLOCK)):
            if started and not decoder.eof:
                stream.problem = f"truncated {kind} stream after {stream.produced} bytes"
            return
        started = True
        try:
            out, pending = step(decoder, pending, limit - stream.produced)
        except error as exc:
            stream.problem = f"corrupt {kind} data after {stream.produced} bytes ({exc})"
            return
        if decoder.eof:
            pending, decoder, started = decoder.unused_data + pending, fresh(), False
        stream.produced += len(out)
        yield out
    if pending or handle.read(1):
        stream.problem = f"decompressed size exceeds {limit} bytes; rest not read"


def read_pieces(path: Path, size: int, limit: int = MAX_STREAMED_BYTES, max_lines: int = MAX_PIECE_LINES) -> Iterator[Piece]:
    """The file's content (decompressed when gzip or zstd, by magic) in pieces of about `size`
    bytes and at most about `max_lines` lines, ending at a newline, up to `limit` bytes
    (MAX_DECOMPRESSED_BYTES for a compressed file: inflating takes time even when memory is
    bounded). A line longer than a piece is cut where the piece ends."""
    with open_input(path) as handle:
        stored = max(os.fstat(handle.fileno()).st_size, 1)
        kind = compression_of(handle.read(4))
        handle.seek(0)
        stream = _Stream()
        if kind is None:
            blocks = _plain_blocks(handle, stream, limit)
        else:
            limit = min(limit, MAX_DECOMPRESSED_BYTES)
            blocks = _inflated_blocks(handle, stream, limit, kind)
        carry, consumed, buffered, held = b"", 0, [], 0
        for block in blocks:
            buffered.append(block)
            held += len(block)
            if held + len(carry) < size:
                continue
            data, buffered, held = carry + b"".join(buffered), [], 0
            cut = data.rfind(b"\n") + 1 or len(data)
            carry = data[cut:]
            position = handle.tell()
            share = (position - consumed) / stored
            for part in _at_most_lines(data[:cut], max_lines):
                yield Piece(part, False, share * len(part) / cut)
            consumed = position
        rest, share = carry + b"".join(buffered), max(stored - consumed, 0) / stored
        parts = list(_at_most_lines(rest, max_lines)) or [b""]
        for part in parts[:-1]:
            yield Piece(part, False, share * len(part) / len(rest))
        yield Piece(parts[-1], True, share * len(parts[-1]) / max(len(rest), 1), stream.problem)


def _at_most_lines(data: bytes, most: int) -> Iterator[bytes]:
    """`data` cut at newlines into parts of at most `most` lines (a million one-character lines
    cost a frame far more than their bytes)."""
    while data:
        end, lines = len(data), data.count(b"\n")
        while lines > most:  # cut where the line count says, then closer, until it fits
            end = data.rfind(b"\n", 0, end * most // lines) + 1 or data.find(b"\n") + 1
            lines = data.count(b"\n", 0, end)
        yield data[:end]
        data = data[end:]


def read_head(path: Path, size: int = 64 << 10) -> bytes:
    """The first `size` bytes of content (decompressed), for sniffing the kind of a file."""
    with open_input(path) as handle:
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
