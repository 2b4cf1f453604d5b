"""Step-time spikes that recur every N steps (checkpoints, evaluation, GC, data re-loops).

Notes:
    A spike is a step whose time exceeds the rank's median by more than 4 robust
    deviations (median absolute deviation, floored at 5% of the median so that
    perfectly steady logs do not turn noise into spikes). With at least three spikes,
    the most common gap between consecutive spike steps is the period when it explains
    at least 60% of the gaps; `strength` is that share. The rank with the most metric
    lines is analyzed (logging is often rank 0 or the last rank only).
"""

from __future__ import annotations

import polars as pl

MIN_SPIKES = 3
MIN_STRENGTH = 0.6
SPIKE_MADS = 4.0

PERIODICITY = {
    "signal": pl.String,
    "rank": pl.Int32,
    "period_steps": pl.Int64,
    "period_seconds": pl.Float64,
    "strength": pl.Float64,
    "spikes": pl.Int64,
    "explained_by": pl.String,
}


def step_times(metrics: pl.DataFrame) -> pl.DataFrame:
    """(rank, step, time, step_time_s) per logged step; derived from timestamps when not logged."""
    steps = metrics.filter(pl.col("step").is_not_null()).unique(["rank", "step"], keep="first").sort(["rank", "step"])
    derived = (pl.col("time").diff().dt.total_microseconds() / 1e6) / pl.col("step").diff()
    return steps.with_columns(
        step_time_s=pl.coalesce("step_time_s", derived.over("rank")),
    ).filter(pl.col("step_time_s").is_not_null() & (pl.col("step_time_s") > 0))


def spikes(times: pl.DataFrame) -> pl.DataFrame:
    """Rows of `times` (one rank) that are step-time spikes."""
    median = times["step_time_s"].median()
    mad = (times["step_time_s"] - median).abs().median()
    threshold = median + SPIKE_MADS * max(mad or 0.0, 0.05 * median)
    return times.filter(pl.col("step_time_s") > threshold)


def find_periodicity(metrics: pl.DataFrame, times: pl.DataFrame | None = None) -> pl.DataFrame:
    times = step_times(metrics) if times is None else times
    if times.is_empty():
        return pl.DataFrame(schema=PERIODICITY)
    busiest = times.group_by("rank").len().sort(["len", "rank"], descending=[True, False])["rank"][0]
    series = times.filter(pl.col("rank").eq_missing(busiest))
    peaks = spikes(series)
    if peaks.height < MIN_SPIKES:
        return pl.DataFrame(schema=PERIODICITY)
    gaps = peaks["step"].diff().drop_nulls()
    period = int(gaps.mode().sort()[0])
    strength = float((gaps == period).mean())
    if strength < MIN_STRENGTH or period <= 1:
        return pl.DataFrame(schema=PERIODICITY)
    return pl.DataFrame(
        {
            "signal": ["step_time"],
            "rank": [busiest],
            "period_steps": [period],
            "period_seconds": [round(period * float(series["step_time_s"].median()), 2)],
            "strength": [round(strength, 2)],
            "spikes": [peaks.height],
            "explained_by": [None],
        },
        schema=PERIODICITY,
    )
