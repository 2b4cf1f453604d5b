"""Host memory that climbs steeply in a trainer's own lines: a leak heading for the OOM killer.

Enters: LINES. Leaves: MEM001 findings (HOST_OOM, warning, symptom), one per stream (file,
rank) whose host memory readings rose at least CLIMB times from the stream's first reading
to its last, ending at MIN_GIB or more. Readings are the trainers' own reports of the
process's or host's RAM: WeNet's `RSS MEM USE: 212.04G`, DeepSpeed's `CPU Virtual Memory:
used = 29.71 GB`, and `rss`/`host memory`/`cpu memory`/`RAM` followed by a size in G/GB/GiB.
The kernel's OOM killer leaves no line in the trainer's log; a climb like this is often the
only sign, and a run still stepping while its memory multiplies is not healthy. A warning:
a kill line or an error outranks it. Cites the stream's last reading.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, citing, empty

HOST_MEMORY = (
    r"(?i)(?:\bRSS MEM USE:|CPU Virtual Memory:\s+used =|\b(?:rss|host[ _]mem(?:ory)?|cpu[ _]mem(?:ory)?|ram)(?: used)?[=:])"
    r"\s*(\d+(?:\.\d+)?)\s?(?:G|GB|GiB)\b"
)
CLIMB = 4.0
MIN_GIB = 16.0
MIN_READINGS = 3


def host_memory_climb(lines: pl.DataFrame) -> pl.DataFrame:
    """MEM001 per stream whose host memory readings multiplied (see module notes)."""
    if lines.is_empty():
        return empty(FINDINGS)
    readings = lines.filter(pl.col("text").str.contains(HOST_MEMORY)).with_columns(
        gib=pl.col("text").str.extract(HOST_MEMORY).cast(pl.Float64, strict=False)
    )
    if readings.height < MIN_READINGS:
        return empty(FINDINGS)
    streams = (
        readings.sort("file", "line")
        .group_by("file", pl.col("rank").fill_null(-1).alias("stream"), maintain_order=True)
        .agg(
            pl.len().alias("readings"),
            pl.col("gib").first().alias("first_gib"),
            pl.col("gib").last().alias("last_gib"),
            pl.col("line").last(),
            pl.col("rank").last(),
            pl.col("time").last(),
            pl.col("text").last(),
            pl.col("host").last(),
        )
        .filter(
            pl.col("readings") >= MIN_READINGS,
            pl.col("last_gib") >= MIN_GIB,
            pl.col("last_gib") >= CLIMB * pl.col("first_gib"),
        )
    )
    return citing(
        streams,
        pattern="MEM001",
        title=pl.format("Host memory climbed from {} to {} GB over {} readings", "first_gib", "last_gib", "readings"),
        category="HOST_OOM",
        severity="warning",
        role="symptom",
        captures=pl.struct("first_gib", "last_gib", "readings").struct.json_encode(),
    )
