"""NCCL RAS reports name the ranks a communicator is missing or that lag in operations."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.flow import analyze
from forensics.passes.nccl_ras import ras_findings
from tests.conftest import lines_frame

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def _report(name: str, file: str = "ncclras.txt") -> list[str]:
    return (FORMATS / name / file).read_text().splitlines()


def test_a_rank_missing_from_a_communicator_is_the_culprit_and_a_cut_rank_line_names_no_one():
    analysis = analyze(FORMATS / "ncclras_nccl1762_incomplete_missing_rank")
    ras = analysis.incident.findings.filter(pl.col("pattern").str.starts_with("RAS"))
    assert ras.select("pattern", "rank", "host", "gpu", "line").rows() == [("RAS001", 1, "10.4.109.13", 0, 38)]
    assert (analysis.verdict.category, analysis.verdict.state, analysis.verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", "hung", [1])


def test_when_ras_names_the_ranks_ahead_the_lagging_side_is_cited_and_no_rank_is_blamed():
    found = ras_findings(lines_frame(_report("ncclras_nccl1911_allgather_count_mismatch"), rank=None))
    assert found.select("pattern", "rank", "line").rows() == [("RAS003", None, 26)]
    assert found["text"].to_list() == ["  30 ranks have launched up to operation 640"]


def test_when_ras_names_the_lagging_side_those_ranks_are_blamed():
    # The #1911 report with its two sides' operation counts swapped: the named pair is now behind.
    swapped = [
        line.replace("operation 640", "operation 64x").replace("operation 641", "operation 640").replace("operation 64x", "operation 641")
        for line in _report("ncclras_nccl1911_allgather_count_mismatch")
    ]
    found = ras_findings(lines_frame(swapped, rank=None))
    assert found.select("pattern", "rank", "gpu", "host").rows() == [
        ("RAS002", 12, 4, "10.137.190.124"),
        ("RAS002", 13, 5, "10.137.190.124"),
    ]


def test_an_all_ok_report_adds_nothing_and_the_watchdog_decides():
    analysis = analyze(FORMATS / "ncclras_nccl1730_ok_while_watchdog_timeout")
    assert analysis.incident.findings.filter(pl.col("pattern").str.starts_with("RAS")).is_empty()
    assert (analysis.verdict.category, analysis.verdict.state) == ("COLLECTIVE_TIMEOUT", "hung")
    assert ras_findings(lines_frame(_report("ncclras_nccl1730_ok_while_watchdog_timeout", "console.log"), rank=None)).is_empty()


def test_text_without_a_ras_report_costs_nothing():
    assert ras_findings(
        lines_frame(["  Rank 3 -- GPU 1 managed by process 1 on node a", "  2 ranks have launched up to operation 5"], rank=None)
    ).is_empty()
