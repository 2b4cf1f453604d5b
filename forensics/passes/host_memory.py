"""Host memory that climbs steeply in a trainer's own lines: a leak heading for the OOM killer.

Enters: LINES. Leaves: MEM001 findings (HOST_OOM, warning, symptom), one per stream (file,
rank) whose host memory readings rose at least CLIMB times from the stream's first reading
to its last, ending at MIN_GIB or more. Readings are the trainers' own reports of the
process's or host's RAM: WeNet's `RSS MEM USE: 212.04G`, DeepSpeed's `CPU Virtual Memory:
used = 29.71 GB`, and `rss`/`host memory`/`cpu memory`/`RAM` followed by a size in G/GB/GiB.
The kernel's OOM killer leaves no line in the trainer's log; a climb like this is often the
only sign, and a run still stepping while its memory multiplies is not healthy. A warning:
a kill line or an error outranks it. Cites the stream's last reading.

MEM002 (HOST_OOM, error, initiating): gperftools' tcmalloc (the allocator of Colab and many
Python builds) reports every allocation of a gigabyte or more, `tcmalloc: large alloc
6457049088 bytes == 0x… @ …`. One of at least LARGE_ALLOC_GIB within NEAR_LINES of the process
being stopped from outside (a `^C` line, which Colab prints when it kills a cell that ran the
VM out of memory, a bare `Killed`, or Jupyter's `KernelRestarter: restarting kernel`) is the
allocation that exhausted host memory. Cites the largest such allocation of each stream.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, citing, empty

HOST_MEMORY = (
    r"(?i)(?:\bRSS MEM USE:|CPU Virtual Memory:\s+used =|\b(?:rss|host[ _]mem(?:ory)?|cpu[ _]mem(?:ory)?|ram)(?: used)?[=:])"
    r"\s*(\d+(?:\.\d+)?)\s?(?:G|GB|GiB)\b"
)
LARGE_ALLOC = r"tcmalloc: large alloc (\d+) bytes"
STOPPED = r"^\s*\^C\W*$|^\s*Killed\s*$|KernelRestarter: restarting kernel"
LARGE_ALLOC_GIB = 4.0
NEAR_LINES = 20
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


def large_allocation_then_stopped(lines: pl.DataFrame) -> pl.DataFrame:
    """MEM002 per stream where a huge tcmalloc allocation came just before the process was stopped."""
    if lines.is_empty():
        return empty(FINDINGS)
    stream = ["file", pl.col("rank").fill_null(-1).alias("_stream")]
    allocs = lines.filter(pl.col("text").str.contains(LARGE_ALLOC)).with_columns(
        gib=pl.col("text").str.extract(LARGE_ALLOC).cast(pl.Float64, strict=False) / 2**30
    )
    allocs = allocs.filter(pl.col("gib") >= LARGE_ALLOC_GIB)
    stops = lines.filter(pl.col("text").str.contains(STOPPED)).select(*stream, stop_line=pl.col("line"))
    if allocs.is_empty() or stops.is_empty():
        return empty(FINDINGS)
    near = (
        allocs.with_columns(stream[1])
        .join(stops, on=["file", "_stream"])
        .filter((pl.col("stop_line") - pl.col("line")).abs() <= NEAR_LINES)
        .sort("gib", "line", descending=[True, False])
        .unique(["file", "_stream"], keep="first", maintain_order=True)
    )
    return citing(
        near,
        pattern="MEM002",
        title=pl.format("A {} GiB host allocation, then the process was stopped: host memory ran out", pl.col("gib").round(1)),
        category="HOST_OOM",
        severity="error",
        role="initiating",
        captures=pl.struct(alloc_gib=pl.col("gib").round(2), stopped_at_line="stop_line").struct.json_encode(),
    )
