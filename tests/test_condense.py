"""Large text files are condensed as read: what the passes read stays, the verdict does not change."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from forensics.catalog.load import load_full
from forensics.flow import analyze, kept_literals
from forensics.ingest import condense as c
from forensics.ingest import rank_logs
from forensics.ingest.rank_logs import TextFile, read_text_files
from forensics.ingest.text import read_pieces
from forensics.output import write_report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "incidents"
CASCADE = FIXTURES / "cuda_oom_8rank_cascade"
NAN_LOG = FIXTURES / "nan_silent" / "logs" / "nan_silent_mbedednl" / "attempt_0" / "3" / "stdout.log"
STEP = re.compile(r"step: \d+")


def padded(text: str, extra: int) -> str:
    """`text` with `extra` more metric lines after its last one, each a real line with a new step number."""
    lines = text.splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if STEP.search(line))
    padding = [STEP.sub(f"step: {100_000 + n}", lines[last]) for n in range(extra)]
    return "".join(lines[: last + 1] + padding + lines[last + 1 :])


def frame(text: str) -> pl.DataFrame:
    return pl.DataFrame({"raw": text.splitlines()}).with_row_index("line", offset=1).with_columns(pl.col("line").cast(pl.Int64))


def test_small_files_are_kept_whole():
    text = (CASCADE / "rank_5.log").read_text()
    assert c.condense(frame(text), c.WORDS_ONLY, 10).height == len(text.splitlines())


def test_a_large_file_keeps_its_traceback_head_tail_and_a_metric_sample():
    text = padded((CASCADE / "rank_5.log").read_text(), 30_000)
    lines = frame(text)
    kept = c.condense(lines, kept_literals(load_full()), metric_lines=1_000)
    assert kept.height < lines.height / 10
    tail = lines.filter(pl.col("line") > lines.height - c.TAIL_LINES)
    assert tail.join(kept, on=["line", "raw"], how="anti").is_empty()
    oom = lines.filter(pl.col("raw").str.contains("torch.OutOfMemoryError", literal=True))["line"][0]
    traceback_start = lines.filter(pl.col("raw").str.contains("Traceback (most recent call last)", literal=True))["line"][0]
    block = lines.filter(pl.col("line").is_between(traceback_start, oom))
    assert block.join(kept, on=["line", "raw"], how="anti").is_empty()
    metric_kept = kept.filter(pl.col("raw").str.contains("step: ", literal=True)).height
    assert metric_kept <= 1_000 + c.HEAD_LINES + c.TAIL_LINES + c.BEFORE_HIT  # the sample, and what is kept anyway
    assert kept["line"].is_sorted()


def test_nonfinite_values_are_kept_whatever_the_stride():
    lines = NAN_LOG.read_text().splitlines()
    nan_lines = [line for line in lines if re.search(r"loss:?\s*nan", line)]
    assert nan_lines, "the fixture logs a nan loss"
    big = "\n".join(lines[:3] + [lines[3]] * 40_000 + lines[3:]) + "\n"
    kept = c.condense(frame(big), c.WORDS_ONLY, metric_lines=200)
    assert set(nan_lines) <= set(kept["raw"].to_list())


def test_no_block_spans_a_cut(tmp_path):
    """A traceback kept in full stays one block; the line after a cut starts its own."""
    text = padded((CASCADE / "rank_5.log").read_text(), 30_000)
    (tmp_path / "rank_5.log").write_text(text)
    lines, statuses, _ = read_text_files(tmp_path, [TextFile("rank_5.log", 5)], kept_literals(load_full()), metric_budget=1_000)
    assert statuses[0].lines == len(text.splitlines()) and statuses[0].lines_kept < statuses[0].lines / 10
    oom = lines.filter(pl.col("text").str.contains("torch.OutOfMemoryError", literal=True))
    start = lines.filter(pl.col("text").str.contains("Traceback (most recent call last)", literal=True))["line"][0]
    assert oom["block"][0] == start
    gaps = lines.filter(pl.col("line").diff() > 1)
    assert not gaps.is_empty() and (gaps["block"] == gaps["line"]).all()


def test_condensed_incident_keeps_the_fixture_verdict(tmp_path):
    incident = tmp_path / "cascade"
    shutil.copytree(CASCADE, incident)
    for log in incident.glob("rank_*.log"):
        log.write_text(padded(log.read_text(), 25_000))
    analysis = analyze(incident)
    expected = json.loads((CASCADE / "expected.json").read_text())
    assert analysis.verdict.category == expected["category"]
    assert analysis.verdict.culprit_ranks == expected["culprit_ranks"]
    inputs = analysis.incident.inputs.filter(pl.col("path").str.starts_with("rank_"))
    assert (inputs["lines_kept"] < inputs["lines"]).all()  # 8 files share the metric budget: every other line
    out = tmp_path / "out"
    write_report(analysis, out)
    report = (out / "postmortem.md").read_text()
    assert "Condensed as read (8 large files)" in report and "is not seen" in report
    verdict = json.loads((out / "verdict.json").read_text())
    assert all(i["lines_kept"] < i["lines"] for i in verdict["inputs"] if i["path"].startswith("rank_"))


def test_a_huge_file_is_read_in_pieces_and_keeps_a_failure_that_straddles_two(tmp_path, monkeypatch):
    """Pieces of 64 KB stand for the 128 MiB ones: the OOM traceback is put across a boundary."""
    monkeypatch.setattr(rank_logs, "CHUNK_BYTES", 64 << 10)
    original = (CASCADE / "rank_5.log").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(original) if "Traceback (most recent call last)" in line)
    metric = next(line for line in original if STEP.search(line))
    before = [STEP.sub(f"step: {100_000 + n}", metric) for n in range(30_000)]
    lines = original[:start] + before + original[start:]
    text = "".join(lines)
    boundary = (len("".join(original[:start] + before)) // (64 << 10)) * (64 << 10)
    (tmp_path / "rank_5.log").write_text(text)
    frame, statuses, _ = read_text_files(tmp_path, [TextFile("rank_5.log", 5)], kept_literals(load_full()), metric_budget=2_000)
    status = statuses[0]
    assert status.lines == len(lines) and status.lines_kept < len(lines) / 10 and status.problem is None
    assert boundary > 0  # the file is many pieces long
    by_line = dict(zip(frame["line"].to_list(), frame["text"].to_list(), strict=True))
    for number in range(start + len(before) + 1, len(lines) + 1):  # the traceback and the tail, whole and in place
        assert by_line.get(number) == lines[number - 1].rstrip("\n")
    assert by_line[1] == lines[0].rstrip("\n")
    assert frame["line"].is_unique().all()


def test_pieces_end_at_newlines_and_the_last_is_flagged(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a" * 10 + b"\n" + b"b" * 30 + b"\nc\nlast")
    pieces = [(p.data, p.last) for p in read_pieces(path, 16)]
    assert b"".join(data for data, _ in pieces) == path.read_bytes()
    assert [last for _, last in pieces] == [False] * (len(pieces) - 1) + [True]
    assert all(data.endswith(b"\n") or last or len(data) >= 16 for data, last in pieces)


def test_a_piece_of_tiny_lines_is_cut_to_a_bounded_line_count_and_nothing_is_lost(tmp_path):
    """A .gz of one-character lines: memory follows lines, not bytes, so pieces are bounded in both."""
    path = tmp_path / "rank_0.log.gz"
    text = b"a\n" * 5000 + b"a longer line near the end\n" + b"b\n" * 999 + b"unterminated"
    path.write_bytes(gzip.compress(text))
    pieces = list(read_pieces(path, 1 << 20, max_lines=700))
    assert b"".join(p.data for p in pieces) == text
    assert max(p.data.count(b"\n") for p in pieces) <= 700 and len(pieces) >= 6000 // 700
    assert [p.last for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert sum(p.share for p in pieces) == pytest.approx(1.0)


def test_a_line_longer_than_a_piece_does_not_shift_the_numbers_of_the_lines_after_it(tmp_path, monkeypatch):
    monkeypatch.setattr(rank_logs, "CHUNK_BYTES", 64 << 10)
    original = (CASCADE / "rank_5.log").read_text().splitlines(keepends=True)
    metric = next(line for line in original if STEP.search(line))
    padding = [STEP.sub(f"step: {100_000 + n}", metric) for n in range(25_000)]
    huge = "x" * (200 << 10) + "\n"  # a hostile line three pieces long
    lines = original[:5] + [huge] + padding + original[5:]
    (tmp_path / "rank_5.log").write_text("".join(lines))
    frame, statuses, _ = read_text_files(tmp_path, [TextFile("rank_5.log", 5)], kept_literals(load_full()), metric_budget=2_000)
    assert statuses[0].lines == len(lines)
    by_line = dict(zip(frame["line"].to_list(), frame["text"].to_list(), strict=True))
    assert by_line[len(lines)] == lines[-1].rstrip("\n")
    oom = next(i for i, line in enumerate(lines, start=1) if "torch.OutOfMemoryError" in line)
    assert by_line[oom] == lines[oom - 1].rstrip("\n")
