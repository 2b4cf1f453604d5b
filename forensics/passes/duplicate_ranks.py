"""Processes of one job that each took the same global rank, so the group never completes.

Notes:
    PyTorch Lightning announces each process as it joins the process group:
    `initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8` (1.x), `Initializing distributed:
    GLOBAL_RANK: 1, MEMBER: 2/8` (2.x). When a launcher starts the processes without
    telling each one its place (plain `srun` without `--ntasks-per-node`, a node rank left
    at 0 on every node), the nodes hand out the same ranks: as many processes announce
    themselves as the group has members, but fewer distinct ranks, and the ranks no one took
    are never there. The group's rendezvous waits for them until it times out.
    - LAUNCH001 (ENVIRONMENT, initiating, waits): one file holds at least MEMBER-count
      announcements naming fewer distinct ranks than that; cites the second announcement
      of the first rank taken twice, and counts the ranks never taken.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

ANNOUNCEMENT = r"(?i)initializing (?:ddp|distributed): GLOBAL_RANK: (?P<rank>\d+), MEMBER: \d+/(?P<world>\d+)"


def ranks_taken_twice(lines: pl.DataFrame) -> pl.DataFrame:
    """LAUNCH001 per file whose join announcements repeat ranks while others are never taken."""
    if lines.is_empty():
        return empty(FINDINGS)
    announced = (
        lines.filter(pl.col("text").str.contains(ANNOUNCEMENT))
        .with_columns(pl.col("text").str.extract_groups(ANNOUNCEMENT).alias("_a"))
        .with_columns(
            global_rank=pl.col("_a").struct.field("rank").cast(pl.Int64, strict=False),
            members=pl.col("_a").struct.field("world").cast(pl.Int64, strict=False),
        )
        .drop_nulls(["global_rank", "members"])  # a number past Int64 is no rank a launcher gave
    )
    if announced.is_empty():
        return empty(FINDINGS)
    per_file = announced.group_by("file", "members").agg(
        pl.len().alias("announcements"), pl.col("global_rank").n_unique().alias("distinct")
    )
    short = per_file.filter((pl.col("announcements") >= pl.col("members")) & (pl.col("distinct") < pl.col("members")))
    if short.is_empty():
        return empty(FINDINGS)
    repeats = (
        announced.join(short, on=["file", "members"])
        .sort("line")
        .with_columns(nth=pl.int_range(pl.len()).over("file", "global_rank"))
        .filter(pl.col("nth") == 1)
        .group_by("file", maintain_order=True)
        .first()
    )
    found = repeats.with_columns(
        pattern=pl.lit("LAUNCH001"),
        title=pl.format(
            "Two processes took global rank {} of {}: {} of the {} ranks were never taken, so the group cannot complete",
            "global_rank",
            "members",
            pl.col("members") - pl.col("distinct"),
            "members",
        ),
        category=pl.lit("ENVIRONMENT"),
        severity=pl.lit("error"),
        role=pl.lit("initiating"),
        rank=pl.lit(None, pl.Int32),
    )
    return conform(found, FINDINGS)
