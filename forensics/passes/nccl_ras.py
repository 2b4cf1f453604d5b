"""NCCL RAS reports (`ncclras`): the ranks a communicator is missing, and the ranks that lag.

Notes:
    NCCL's RAS client (`ncclras`, NCCL 2.24 and later) prints a job-wide report: a
    Communicators table, then Errors and Warnings, each issue a block headed `#0-0 (fa93daea854b060b)
    MISMATCH` (group-communicator, the communicator's hash, what is wrong) with indented
    details up to a blank line: `Missing communicator data from 1 rank`, `30 ranks have
    launched up to operation 640`, and a `Rank 12 -- GPU 4 managed by process 323032 on
    node 10.137.190.124` line per rank it names (the smaller side of a split).
    - RAS001 (COLLECTIVE_TIMEOUT, initiating): a rank named under INCOMPLETE: RAS got no
      data for the communicator from it; its process is dead, stuck outside NCCL or never
      joined.
    - RAS002 (COLLECTIVE_TIMEOUT, initiating): a rank named under MISMATCH whose side
      launched the fewest operations: the others wait in the next one for it.
    - RAS003 (COLLECTIVE_TIMEOUT, symptom): a MISMATCH whose lagging side RAS did not name
      (it named the ranks ahead, as in NVIDIA/nccl#1911): cites the lagging side's count
      line, and blames no rank.
    A rank line that does not parse whole (a report cut short, NCCL 2.27.3's `Rank
    1057455228 --` for an uninitialized communicator) names no one. A report whose
    communicators are all OK is no proof of health: RAS sees NCCL's own state only
    (NVIDIA/nccl#1730: OK while PyTorch's watchdog timed out an all-reduce).
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, citing, empty

ISSUE_HEADER = r"^#(\d+-\d+) \([0-9a-f]+\) ([A-Z,]+)\s*$"
RANK_LINE = r"^\s+Rank (\d+) -- GPU (\d+) managed by process (\d+) on node (\S+)\s*$"
LAUNCHED = r"^\s+(\d+) ranks? ha(?:s|ve) launched up to operation (\d+)\s*$"


def ras_findings(lines: pl.DataFrame) -> pl.DataFrame:
    """RAS00x findings from every RAS report among `lines` (see Notes)."""
    headed = lines.filter(pl.col("text").str.starts_with("#"))  # a cheap scan first: most lines are no RAS header
    reports = headed.filter(pl.col("text").str.contains(ISSUE_HEADER)).select("file").unique()
    if reports.is_empty():
        return empty(FINDINGS)
    text = pl.col("text")
    header = text.str.extract_groups(ISSUE_HEADER)
    # Each line's issue: the header above it, up to the blank line that ends the block.
    issue_lines = (
        lines.join(reports, on="file", how="semi")
        .with_columns(
            _start=pl.when(text.str.contains(ISSUE_HEADER)).then(pl.col("line")).when(text.str.strip_chars() == "").then(-1),
            _comm=header.struct["1"],
            _kind=header.struct["2"],
        )
        .with_columns(pl.col("_start", "_comm", "_kind").forward_fill().over("file", order_by="line"))
        .filter(pl.col("_start") > 0)
    )
    named = _named_ranks(issue_lines)
    counts = issue_lines.with_columns(
        _n=text.str.extract(LAUNCHED, 1).cast(pl.Int64), _op=text.str.extract(LAUNCHED, 2).cast(pl.Int64)
    ).filter(pl.col("_n").is_not_null())
    return pl.concat([_missing(named), *_behind(named, counts)])


def _named_ranks(issue_lines: pl.DataFrame) -> pl.DataFrame:
    """One row per well-formed `Rank N -- GPU g managed by process p on node X` line."""
    parts = pl.col("text").str.extract_groups(RANK_LINE)
    return (
        issue_lines.with_columns(_parts=parts)
        .filter(pl.col("_parts").struct["1"].is_not_null())
        .with_columns(
            rank=pl.col("_parts").struct["1"].cast(pl.Int32),
            host=pl.col("_parts").struct["4"],
            gpu=pl.col("_parts").struct["2"].cast(pl.Int32),
            _pid=pl.col("_parts").struct["3"],
        )
        .drop("_parts")
    )


def _missing(named: pl.DataFrame) -> pl.DataFrame:
    rows = named.filter(pl.col("_kind").str.contains("INCOMPLETE"))
    return citing(
        rows,
        pattern="RAS001",
        title=pl.format(
            "NCCL RAS has no data from rank {} for communicator #{}: its process is dead, stuck outside NCCL or never joined",
            "rank",
            "_comm",
        ),
        category="COLLECTIVE_TIMEOUT",
        severity="error",
        role="initiating",
        captures=pl.struct(communicator="_comm", process="_pid", node="host").struct.json_encode(),
    ).with_columns(gpu=rows["gpu"])


def _behind(named: pl.DataFrame, counts: pl.DataFrame) -> list[pl.DataFrame]:
    """RAS002 for named ranks on the side that launched fewest; RAS003 where the lagging side is unnamed."""
    mismatch = counts.filter(pl.col("_kind").str.contains("MISMATCH"))
    if mismatch.is_empty():
        return []
    sides = mismatch.group_by("file", "_start", maintain_order=True).agg(
        _lowest=pl.col("_op").min(),
        _lagging=pl.col("_n").sort_by("_op").first(),
        _count_line=pl.col("line").sort_by("_op").first(),
        _count_text=pl.col("text").sort_by("_op").first(),
    )
    named_n = named.group_by("file", "_start").agg(_named=pl.len())
    # The named ranks' side is the count line with as many ranks as RAS named (none when ambiguous).
    named_side = (
        mismatch.join(named_n, on=["file", "_start"])
        .filter(pl.col("_n") == pl.col("_named"))
        .group_by("file", "_start")
        .agg(_named_op=pl.col("_op").first(), _sides=pl.len())
        .filter(pl.col("_sides") == 1)
    )
    sides = sides.join(named_side.drop("_sides"), on=["file", "_start"], how="left")
    lagging_named = sides.filter(pl.col("_named_op") == pl.col("_lowest")).select("file", "_start", "_lowest")
    ranks = named.join(lagging_named, on=["file", "_start"])
    blamed = citing(
        ranks,
        pattern="RAS002",
        title=pl.format(
            "NCCL RAS: rank {} launched the fewest operations on communicator #{} (up to {}); the others wait for it",
            "rank",
            "_comm",
            "_lowest",
        ),
        category="COLLECTIVE_TIMEOUT",
        severity="error",
        role="initiating",
        captures=pl.struct(communicator="_comm", operation="_lowest", process="_pid", node="host").struct.json_encode(),
    ).with_columns(gpu=ranks["gpu"])
    unnamed = (
        sides.filter(pl.col("_named_op").is_null() | (pl.col("_named_op") != pl.col("_lowest")))
        .join(
            mismatch.select("file", "_start", "_comm", "line", "rank", "host", "time"),
            left_on=["file", "_start", "_count_line"],
            right_on=["file", "_start", "line"],
        )
        .rename({"_count_line": "line", "_count_text": "text"})
    )
    lagging = citing(
        unnamed,
        pattern="RAS003",
        title=pl.format(
            "NCCL RAS: {} ranks of communicator #{} launched operations only up to {}, behind the rest; RAS does not name them",
            "_lagging",
            "_comm",
            "_lowest",
        ),
        category="COLLECTIVE_TIMEOUT",
        severity="error",
        role="symptom",
        captures=pl.struct(communicator="_comm", operation="_lowest", ranks_behind="_lagging").struct.json_encode(),
    )
    return [blamed, lagging]
