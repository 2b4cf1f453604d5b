"""Logs that stop where PyTorch builds or loads a compiled extension: the build lock was never released.

Notes:
    `torch.utils.cpp_extension.load` (DeepSpeed's fused ops, nvdiffrast, custom CUDA kernels)
    prints `Using <dir> as PyTorch extensions root...`, then takes a lock file in the
    extension's build directory, and within seconds goes on: `Emitting ninja build file`,
    `Loading extension module <name>...`. A process that finds a lock another process holds
    waits for it, printing nothing; a lock left behind by a build that was killed is never
    released. So when every log of the incident ends on that line (trailing blank lines
    aside), every process is waiting on the lock:
    - HANG009 (ENVIRONMENT, initiating, waits): cites the last such line of each log. A log
      that goes on past the line (the build went through, or a traceback followed) breaks it.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

EXTENSIONS_ROOT = r"\bUsing\s+\S.* as PyTorch extensions root\.\.\.\s*$"
STREAM = ["file", pl.col("rank").fill_null(-1).alias("_rank")]


def stuck_at_extension_build(lines: pl.DataFrame) -> pl.DataFrame:
    """HANG009 for the last line of each log, when every log ends on the extensions-root line."""
    if lines.is_empty():
        return empty(FINDINGS)
    last = lines.filter(pl.col("text").str.strip_chars() != "").sort("line").group_by(STREAM, maintain_order=True).last().drop("_rank")
    if last.is_empty() or not last["text"].str.contains(EXTENSIONS_ROOT).all():
        return empty(FINDINGS)
    found = last.with_columns(
        pattern=pl.lit("HANG009"),
        title=pl.lit("The log stops where PyTorch builds or loads a compiled extension: waiting on the build lock"),
        category=pl.lit("ENVIRONMENT"),
        severity=pl.lit("error"),
        role=pl.lit("initiating"),
    )
    return conform(found, FINDINGS)
