"""Reading input bytes: compression by magic, truncation and corruption as partial, decoding."""

from __future__ import annotations

import gzip
import os

import pytest
import zstandard

from forensics.ingest.rank_logs import TextFile, read_text_files
from forensics.ingest.text import decode, looks_binary, read_bytes, read_head, read_pieces
from forensics.schema import InputStatus

# A few hundred KB of realistic, compressible log text.
BODY = b"".join(b"[rank3]:[E1206 18:44:%02d.715298746 ProcessGroupNCCL.cpp:607] [Rank 3] line %d\n" % (i % 60, i) for i in range(8000))


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def test_plain_file_is_returned_as_is(tmp_path):
    (tmp_path / "a.log").write_bytes(BODY)
    payload = read_bytes(tmp_path / "a.log")
    assert payload.data == BODY and payload.problem is None


@pytest.mark.parametrize("compress", [gzip.compress, zstd], ids=["gzip", "zstd"])
def test_compressed_file_is_decompressed_by_magic_not_name(tmp_path, compress):
    (tmp_path / "rank_3.log").write_bytes(compress(BODY))  # no .gz/.zst suffix
    payload = read_bytes(tmp_path / "rank_3.log")
    assert payload.data == BODY and payload.problem is None
    assert read_head(tmp_path / "rank_3.log") == BODY[: 64 << 10]


@pytest.mark.parametrize("compress", [gzip.compress, zstd], ids=["gzip", "zstd"])
def test_concatenated_members_are_all_read(tmp_path, compress):
    # `cat a.log.gz b.log.gz > all.log.gz` (log rotation) is a valid stream.
    (tmp_path / "all.gz").write_bytes(compress(b"first\n") + compress(b"second\n") + compress(b"third\n"))
    payload = read_bytes(tmp_path / "all.gz")
    assert payload.data == b"first\nsecond\nthird\n" and payload.problem is None


@pytest.mark.parametrize("compress", [gzip.compress, zstd], ids=["gzip", "zstd"])
def test_truncated_stream_keeps_what_was_recovered(tmp_path, compress):
    whole = compress(BODY)
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    payload = read_bytes(tmp_path / "cut.gz")
    assert payload.problem is not None and "truncated" in payload.problem
    assert 0 < len(payload.data) < len(BODY)
    assert BODY.startswith(payload.data)


@pytest.mark.parametrize("raw", [b"\x1f\x8b" + os.urandom(2000), b"\x28\xb5\x2f\xfd" + os.urandom(2000)], ids=["gzip", "zstd"])
def test_corrupt_stream_is_a_problem_not_an_exception(tmp_path, raw):
    (tmp_path / "bad").write_bytes(raw)
    payload = read_bytes(tmp_path / "bad")
    assert payload.problem is not None and "corrupt" in payload.problem
    assert read_head(tmp_path / "bad") == b""


def test_empty_file(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    payload = read_bytes(tmp_path / "empty.log")
    assert payload.data == b"" and payload.problem is None


@pytest.mark.parametrize("compress", [lambda b: b, gzip.compress, zstd], ids=["plain", "gzip", "zstd"])
def test_size_limit_cuts_and_says_so(tmp_path, compress):
    (tmp_path / "big").write_bytes(compress(BODY))
    payload = read_bytes(tmp_path / "big", limit=1000)
    assert len(payload.data) <= 1000
    assert payload.problem == "file exceeds 1000 bytes; rest not read"


def test_decompression_limit_applies_to_output(tmp_path):
    # A small compressed file that expands past the limit (a "zip bomb" in miniature).
    (tmp_path / "bomb.zst").write_bytes(zstd(b"\0" * 5_000_000))
    payload = read_bytes(tmp_path / "bomb.zst", limit=100_000)
    assert len(payload.data) == 100_000
    assert "exceeds" in payload.problem


def test_invalid_utf8_is_replaced_and_counted():
    text, replaced = decode(b"loss \xff\xfe ok \xe2\x82 end \xef\xbf\xbd")  # last one is a real U+FFFD
    assert replaced == 3
    assert text.startswith("loss ") and text.endswith(" end \ufffd")


def test_valid_utf8_counts_nothing():
    assert decode("rank 3 – OK ✓".encode()) == ("rank 3 – OK ✓", 0)


@pytest.mark.parametrize(
    ("head", "binary"),
    [
        (b"[rank0]: Traceback (most recent call last):\n", False),
        (b"\x1b[31mstep: 1\x1b[0m\tloss\r\n", False),
        (b"", False),
        (b"[rank2]: before\n" + b"\x00" * 4096 + b"[rank2]: after\n", False),  # zero-filled block after a crash
        ("café – ✓ 日本\n".encode() * 50, False),
        (b"\x00" * 8192, True),
        (bytes(range(1, 32)) * 20, True),
        (b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x07version\x94\x8c\x032.3\x94u.", True),  # a pickle
        (bytes((i * 7919 + 13) % 256 for i in range(8192)), True),  # packed data
    ],
)
def test_looks_binary(head, binary):
    assert looks_binary(head) is binary


def test_truncated_gzip_log_is_partial_with_its_lines(tmp_path):
    whole = gzip.compress(BODY)
    (tmp_path / "rank_3.log.gz").write_bytes(whole[: len(whole) // 2])
    lines, statuses, _ = read_text_files(tmp_path, [TextFile("rank_3.log.gz", 3)])
    (status,) = statuses
    assert status.status == InputStatus.PARTIAL
    assert "truncated gzip" in status.problem
    assert 0 < lines.height < 8000
    assert lines["text"][0].startswith("[rank3]:[E1206 18:44:00")


def test_invalid_utf8_log_is_parsed_with_count(tmp_path):
    (tmp_path / "rank_1.log").write_bytes(b"[rank1]: ok\n[rank1]: bad \xff\xff here\n")
    lines, statuses, _ = read_text_files(tmp_path, [TextFile("rank_1.log", 1)])
    (status,) = statuses
    assert status.status == InputStatus.PARSED
    assert status.problem == "2 invalid UTF-8 sequences replaced"
    assert status.lines == 2
    assert lines["text"][1] == "[rank1]: bad \ufffd\ufffd here"


def test_nul_bytes_mid_file_do_not_hide_the_log(tmp_path):
    (tmp_path / "rank_2.log").write_bytes(b"[rank2]: before\n" + b"\x00" * 4096 + b"\n[rank2]: RuntimeError: after\n")
    lines, statuses, _ = read_text_files(tmp_path, [TextFile("rank_2.log", 2)])
    assert statuses[0].status == InputStatus.PARSED
    assert lines["text"].to_list()[-1] == "[rank2]: RuntimeError: after"


def test_missing_file_is_skipped_not_raised(tmp_path):
    lines, statuses, _ = read_text_files(tmp_path, [TextFile("gone.log", 0)])
    assert statuses[0].status == InputStatus.SKIPPED and "unreadable" in statuses[0].problem
    assert lines.is_empty()


def _whole_and_cut(whole: bytes) -> bytes:
    return whole[: len(whole) // 2]


@pytest.mark.parametrize("compress", [lambda b: b, gzip.compress, zstd], ids=["plain", "gzip", "zstd"])
@pytest.mark.parametrize(
    "make",
    [
        lambda c: c(BODY),
        lambda c: c(b"first\n") + c(b"second\n") + c(b"third\n"),
        lambda c: _whole_and_cut(c(BODY)),
    ],
    ids=["whole", "members", "truncated"],
)
def test_streamed_pieces_hold_what_a_whole_read_holds(tmp_path, compress, make):
    path = tmp_path / "rank_3.log"
    path.write_bytes(make(compress))
    pieces = list(read_pieces(path, 4096))
    whole = read_bytes(path)
    assert b"".join(piece.data for piece in pieces) == whole.data
    assert pieces[-1].problem == whole.problem and all(piece.problem is None for piece in pieces[:-1])
    assert [piece.last for piece in pieces] == [False] * (len(pieces) - 1) + [True]
    assert all(piece.data.endswith(b"\n") for piece in pieces[:-1])
    assert sum(piece.share for piece in pieces) == pytest.approx(1.0)


@pytest.mark.parametrize("raw", [b"\x1f\x8b" + os.urandom(2000), b"\x28\xb5\x2f\xfd" + os.urandom(2000)], ids=["gzip", "zstd"])
def test_a_corrupt_stream_ends_its_pieces_with_the_problem(tmp_path, raw):
    (tmp_path / "bad").write_bytes(raw)
    pieces = list(read_pieces(tmp_path / "bad", 4096))
    assert "corrupt" in (pieces[-1].problem or "")


def test_streamed_output_stops_at_its_limit_and_says_so(tmp_path):
    (tmp_path / "big.gz").write_bytes(gzip.compress(BODY))
    pieces = list(read_pieces(tmp_path / "big.gz", 4096, limit=10_000))
    assert sum(len(piece.data) for piece in pieces) == 10_000
    assert "exceeds 10000 bytes" in (pieces[-1].problem or "")
