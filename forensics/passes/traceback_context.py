"""Classify exceptions no pattern knows by where they were raised: the traceback's frames.

Notes:
    An unrecognized `SomethingError: ...` that ends a Python traceback whose frames run
    through checkpoint code (`torch/serialization.py`, `torch/distributed/checkpoint`,
    safetensors, a `save_checkpoint`/`load_checkpoint` function) is a checkpoint I/O
    failure whatever its message (old torch.save says only `write(): fd 29 failed with
    Input/output error`); one raised inside DataLoader machinery is a data-pipeline
    failure. The finding cites the exception line and names the frame that decided it.
    Exceptions already explained by a catalog pattern are left alone.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

EXCEPTION_LINE = r"(?:^|\]:?\s?|: )(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::\s|$)"
FRAME = r'File "[^"]+", line \d+'

CONTEXTS = [
    (
        "CTX001",
        "CHECKPOINT_IO",
        "Exception raised inside checkpoint save/load code",
        r"torch/serialization\.py|torch/distributed/checkpoint/|safetensors|in (?:save|load)_checkpoint\b|in _save\b",
    ),
    (
        "CTX002",
        "DATA_PIPELINE",
        "Exception raised inside DataLoader code",
        r"torch/utils/data/|in _worker_loop\b",
    ),
]


def classify_by_frames(lines: pl.DataFrame, findings: pl.DataFrame) -> pl.DataFrame:
    """Findings for unexplained exception lines whose traceback frames reveal the subsystem."""
    if lines.is_empty():
        return empty(FINDINGS)
    stream = ["file", "block", "rank"]
    traceback_blocks = (
        lines.lazy()
        .filter(pl.col("text").str.contains("Traceback (most recent call last)", literal=True))
        .select(stream)
        .unique()
    )
    scoped = lines.lazy().join(traceback_blocks, on=stream, how="semi", nulls_equal=True)
    explained = findings.filter(pl.col("category") != "UNKNOWN").select("file", "line").unique()
    exceptions = (
        scoped.filter(pl.col("text").str.contains(EXCEPTION_LINE) & ~pl.col("text").str.contains(FRAME))
        .join(explained.lazy(), on=["file", "line"], how="anti")
        .sort("line")
        .group_by(stream, maintain_order=True)
        .last()  # the final exception of the traceback is the one that ended the program
    )
    frames = scoped.filter(pl.col("text").str.contains(FRAME))
    hits = []
    for pattern, category, title, where in CONTEXTS:
        deciding = (
            frames.filter(pl.col("text").str.contains(where))
            .group_by(stream)
            .agg(frame=pl.col("text").last(), frame_line=pl.col("line").last())
        )
        found = exceptions.join(deciding, on=stream, how="inner", nulls_equal=True).with_columns(
            pattern=pl.lit(pattern),
            title=pl.lit(title),
            category=pl.lit(category),
            severity=pl.lit("error"),
            role=pl.lit("initiating"),
            captures=pl.struct("frame", "frame_line").struct.json_encode(),
        )
        hits.append(found)
    result = pl.concat(hits).collect().unique(["file", "line"], keep="first", maintain_order=True)
    return conform(result, FINDINGS)
