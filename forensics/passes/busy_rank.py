"""The rank the others waited for because it was busy, not dead: rank 0 preprocessing data.

Notes:
    Hugging Face `main_process_first`, `datasets.map` and most trainers tokenize or
    preprocess on the main process while every other rank waits at a barrier. When that
    takes longer than the process-group timeout, ranks 1..N time out and rank 0 never
    logs a timeout at all: its last output is a progress bar. The bar carries no rank tag,
    but a dataset-preprocessing bar is printed by the main process only (the others wait),
    so the untagged bar is rank 0's: the finding says so.
    - HANG006 busy: some rank other than 0 timed out or waits in a barrier (a
      COLLECTIVE_TIMEOUT finding, or a traceback frame in `main_process_first` /
      `barrier`), rank 0 has no timeout of its own, and an untagged or rank-0
      preprocessing progress bar precedes the waiting lines. Cites the last such bar,
      and the timeout the waiting ranks ran into when a line states it (`Timeout(ms)=`,
      `timed out after 1800000ms`, `timeout=0:30:00`, `timedelta(seconds=1800)`): how long rank 0 was given.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

# What a preprocessing phase calls itself: `Running tokenizer on dataset`, `caching latents...`.
PREPROCESSING = (
    r"(?i)(?:map|tokeniz|running tokenizer|filter|preprocess|pre-process|convert|packing|grouping|formatting|loading dataset"
    r"|caching|encoding|extracting|scanning)"
)
# `Running tokenizer on dataset:  88%|████▊ | 383700/433643 [29:55<03:25, ...`
PREPROCESSING_BAR = PREPROCESSING + r"[^|\n]{0,120}:?\s+\d{1,3}%\|"
# ` 87%|████▉ | 1582/1818 [30:02<04:26, ...`: a bar with no description of its own; the phase
# is named by the line printed just before it (`caching latents...`), at most LABEL_ABOVE lines up.
BARE_BAR = r"^\s*\d{1,3}%\|"
LABEL_ABOVE = 2
# The configured timeout, as the waiting ranks' own lines state it: milliseconds, h:mm:ss, or seconds.
TIMEOUT_MS = r"Timeout\(ms\)=(\d+)|timed out after (\d+) ?ms\b"
TIMEOUT_HMS = r"\btimeout[=:] ?(\d+:\d\d:\d\d)\b"
TIMEOUT_S = r"\btimeout=datetime\.timedelta\(seconds=(\d+)"
WAITING_FRAME = (
    r"in main_process_first\b|main_process_first\(|in barrier\b|dist\.barrier\(|in _store_based_barrier\b|in monitored_barrier\b"
)


def busy_rank_zero(lines: pl.DataFrame, findings: pl.DataFrame) -> pl.DataFrame:
    """HANG006 for rank 0 when the others waited on it while it preprocessed data."""
    if lines.is_empty():
        return empty(FINDINGS)
    timeouts = findings.filter(pl.col("category") == "COLLECTIVE_TIMEOUT", pl.col("role") != "event")
    if not timeouts.filter(pl.col("rank") == 0).is_empty():
        return empty(FINDINGS)  # rank 0 timed out too: it was waiting, not busy
    waiting = pl.concat(
        [
            timeouts.filter(pl.col("rank").is_null() | (pl.col("rank") != 0)).select("file", "line"),
            lines.filter(pl.col("text").str.contains(WAITING_FRAME) & (pl.col("rank").is_null() | (pl.col("rank") != 0))).select(
                "file", "line"
            ),
        ]
    )
    if waiting.is_empty():
        return empty(FINDINGS)
    first_wait = waiting.sort("line").group_by("file").first()
    # A bar at the very start of a line, or before any bracket on a line whose `[Rank N]` tag
    # comes after it, is untagged even when the line carries a rank: tqdm ends its redraws
    # without a newline, so another rank's message is often glued after the bar.
    bar_first = pl.col("text").str.contains(r"^\s*\d{1,3}%\||^[^\[]*\d{1,3}%\|.*\[[Rr]ank ?\d+\]")
    bars = (
        _preprocessing_bars(lines)
        .filter(pl.col("rank").is_null() | (pl.col("rank") == 0) | bar_first)
        .join(first_wait.rename({"line": "wait_line"}), on="file")
        .filter(pl.col("line") <= pl.col("wait_line"))
        .sort("line")
    )
    if bars.is_empty():
        return empty(FINDINGS)
    timeout = _configured_timeout(lines.join(waiting, on=["file", "line"], how="semi"))
    given = f" for {timeout['seconds']:,} s ({timeout['file']}:{timeout['line']})" if timeout else ""
    last = bars.tail(1).with_columns(
        rank=pl.lit(0, pl.Int32),
        pattern=pl.lit("HANG006"),
        title=pl.lit(
            f"Rank 0 was still preprocessing data (its progress bar, printed by the main process only) while the others waited{given} and timed out"
        ),
        category=pl.lit("COLLECTIVE_TIMEOUT"),
        severity=pl.lit("error"),
        role=pl.lit("initiating"),
        captures=pl.struct(
            waiting_line=pl.col("wait_line"),
            attribution=pl.lit("untagged preprocessing bar -> main process (rank 0)"),
            timeout_s=pl.lit(timeout["seconds"] if timeout else None, pl.Int64),
        ).struct.json_encode(),
    )
    return conform(last, FINDINGS)


def _preprocessing_bars(lines: pl.DataFrame) -> pl.DataFrame:
    """Progress-bar lines of a preprocessing phase: named on the bar, or on the line just above a bare bar."""
    text = pl.col("text")
    bare = text.str.contains(BARE_BAR)
    labelled = lines.sort("file", "line").with_columns(
        _label=pl.when(~bare).then(text).forward_fill().over("file"),
        _label_line=pl.when(~bare).then(pl.col("line")).forward_fill().over("file"),
    )
    named_above = bare & pl.col("_label").str.contains(PREPROCESSING) & (pl.col("line") - pl.col("_label_line") <= LABEL_ABOVE)
    return labelled.filter(text.str.contains(PREPROCESSING_BAR) | named_above).drop("_label", "_label_line")


def _configured_timeout(waiting_lines: pl.DataFrame) -> dict | None:
    """The first timeout a waiting line states, in whole seconds, with its file and line."""
    text = pl.col("text")
    hms = text.str.extract(TIMEOUT_HMS).str.split(":")
    stated = (
        waiting_lines.with_columns(
            seconds=pl.coalesce(
                pl.coalesce(text.str.extract(TIMEOUT_MS, 1), text.str.extract(TIMEOUT_MS, 2)).cast(pl.Int64, strict=False) // 1000,
                text.str.extract(TIMEOUT_S).cast(pl.Int64, strict=False),
                sum(hms.list.get(i, null_on_oob=True).cast(pl.Int64, strict=False) * unit for i, unit in enumerate((3600, 60, 1))),
            )
        )
        .filter(pl.col("seconds").is_not_null())
        .sort("file", "line")
    )
    return stated.select("file", "line", "seconds").row(0, named=True) if not stated.is_empty() else None
