"""When failures happen across a fleet: intervals between them and clustering by hour of day.

Input is the batch index (one row per incident, `start` a UTC datetime or null, `category`).
Only failures count (NO_FAILURE is not one); incidents without a start time are counted
apart, never silently dropped.

Notes:
    * Intervals: per category, the hours between consecutive failures in start order.
      MTBF is their mean; CV = std / mean reads as regular (well below 1: something
      periodic, a cron job or a weekly maintenance), random (about 1, a Poisson process)
      or bursty (above 1: failures come in storms). Needs MIN_INTERVALS intervals.
    * Hour of day: failures per UTC hour; the busiest WINDOW_HOURS-hour window (wrapping
      round midnight) is a cluster when chance explains it poorly: the binomial tail of
      its count at the uniform rate WINDOW_HOURS / 24, times the 24 windows tried, stays
      under MAX_CHANCE. Needs MIN_DATED dated failures.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.periodicity import binomial_tail

MIN_INTERVALS = 3
MIN_DATED = 12
WINDOW_HOURS = 4
MAX_CHANCE = 0.01


def failures(index: pl.DataFrame) -> pl.DataFrame:
    """Analyzed incidents whose verdict is a failure (anything but NO_FAILURE)."""
    return index.filter(pl.col("error").is_null() & (pl.col("category") != "NO_FAILURE"))


def failure_intervals(index: pl.DataFrame) -> pl.DataFrame:
    """Per category with at least MIN_INTERVALS intervals: failures, MTBF and median interval (hours), CV."""
    hours = (pl.col("start").diff().dt.total_seconds() / 3600).over("category")
    gaps = failures(index).filter(pl.col("start").is_not_null()).sort("start").with_columns(gap_h=hours)
    return (
        gaps.group_by("category")
        .agg(
            pl.len().alias("failures"),
            pl.col("gap_h").drop_nulls().mean().alias("mtbf_h"),
            pl.col("gap_h").drop_nulls().median().alias("median_gap_h"),
            (pl.col("gap_h").drop_nulls().std() / pl.col("gap_h").drop_nulls().mean()).alias("cv"),
            pl.col("gap_h").drop_nulls().len().alias("intervals"),
        )
        .filter(pl.col("intervals") >= MIN_INTERVALS)
        .sort("failures", "category", descending=[True, False])
    )


def hour_of_day_cluster(index: pl.DataFrame) -> dict | None:
    """The busiest WINDOW_HOURS-hour UTC window of dated failures when chance does not explain it, else None:
    first hour, failures in it, dated failures, expected share, chance."""
    dated = failures(index).filter(pl.col("start").is_not_null())
    if dated.height < MIN_DATED:
        return None
    per_hour = dated.group_by(pl.col("start").dt.hour().alias("hour")).len()
    counts = dict(per_hour.iter_rows())
    windows = [(h, sum(counts.get((h + k) % 24, 0) for k in range(WINDOW_HOURS))) for h in range(24)]
    first_hour, hits = max(windows, key=lambda w: (w[1], -w[0]))
    share = WINDOW_HOURS / 24
    chance = binomial_tail(hits, dated.height, share) * 24
    if chance >= MAX_CHANCE:
        return None
    return {"first_hour": first_hour, "failures": hits, "dated": dated.height, "expected_share": share, "chance": min(chance, 1.0)}
