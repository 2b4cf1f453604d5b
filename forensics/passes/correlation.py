"""Which logged events (checkpoint saves, evaluation, GC) precede step-time spikes or failures.

Notes:
    Events are findings with role `event` and a timestamp; effects are step-time spikes
    (periodicity.spikes, every rank) and the first initiating finding of each rank.
    For each (event kind, effect) pair: `of` is how many times the event occurred,
    `count` how many of those were followed by the effect within `window_seconds`, and
    `lift` compares that rate with the chance of the effect falling in any window of
    the same length during the run. The window is three median steps long (capped at
    60 s): a stall caused by a checkpoint shows up in the very next steps. Pairs seen fewer than twice are dropped: one
    coincidence is not a correlation.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.periodicity import spikes, step_times

WINDOW_SECONDS = 60
MIN_COUNT = 2

CORRELATIONS = {
    "event": pl.String,
    "effect": pl.String,
    "count": pl.Int64,
    "of": pl.Int64,
    "lift": pl.Float64,
    "window_seconds": pl.Int64,
}


def _effects(findings: pl.DataFrame, times: pl.DataFrame) -> pl.DataFrame:
    times = times.filter(pl.col("time").is_not_null())
    spike_rows = [spikes(group) for _, group in times.group_by("rank")] if not times.is_empty() else []
    # A spike is logged when its step ends; it started step_time_s earlier.
    started = pl.col("time") - pl.duration(microseconds=(pl.col("step_time_s") * 1e6).cast(pl.Int64))
    frames = [s.select(started.alias("time"), effect=pl.lit("step_time_spike")) for s in spike_rows if not s.is_empty()]
    failures = (
        findings.filter((pl.col("role") == "initiating") & pl.col("time").is_not_null())
        .sort("time")
        .group_by("rank", maintain_order=True)
        .first()
        .select("time", effect=pl.format("failure:{}", pl.col("category")))
    )
    frames.append(failures)
    return pl.concat(frames).sort("time") if frames else pl.DataFrame(schema={"time": pl.Datetime("us", "UTC"), "effect": pl.String})


def _window(times: pl.DataFrame) -> int:
    """A few steps long (an effect within the next steps), capped at WINDOW_SECONDS."""
    if times.is_empty():
        return WINDOW_SECONDS
    return max(1, min(WINDOW_SECONDS, round(3 * float(times["step_time_s"].median()))))


def correlate(
    findings: pl.DataFrame, metrics: pl.DataFrame, window_seconds: int | None = None, times: pl.DataFrame | None = None
) -> pl.DataFrame:
    events = (
        findings.filter((pl.col("role") == "event") & pl.col("time").is_not_null())
        .select("time", event=pl.col("title"))
        .unique()
        .sort("time")
    )
    times = step_times(metrics) if times is None else times
    effects = _effects(findings, times)
    window_seconds = window_seconds or _window(times)
    if events.is_empty() or effects.is_empty():
        return pl.DataFrame(schema=CORRELATIONS)
    stamps = pl.concat([events["time"], effects["time"], metrics["time"].drop_nulls()])
    span = (stamps.max() - stamps.min()).total_seconds()
    window = pl.duration(seconds=window_seconds)
    rows = []
    for (effect,), hits in effects.group_by("effect"):
        followed = events.join_asof(
            hits.select(effect_time="time").sort("effect_time"),
            left_on="time",
            right_on="effect_time",
            strategy="forward",
            tolerance=f"{window_seconds}s",
        ).with_columns(hit=pl.col("effect_time").is_not_null() & (pl.col("effect_time") - pl.col("time") <= window))
        per_event = followed.group_by("event").agg(of=pl.len(), count=pl.col("hit").sum())
        base_rate = min(1.0, hits.height * window_seconds / span) if span > 0 else 1.0
        for event, of, count in per_event.select("event", "of", "count").iter_rows():
            if count >= MIN_COUNT:
                lift = (count / of) / base_rate if base_rate > 0 else 0.0
                rows.append(
                    {"event": event, "effect": effect, "count": count, "of": of, "lift": round(lift, 2), "window_seconds": window_seconds}
                )
    if not rows:
        return pl.DataFrame(schema=CORRELATIONS)
    # names break ties: explain_periodicity takes the first row
    return pl.DataFrame(rows, schema=CORRELATIONS).sort(["lift", "count", "event", "effect"], descending=[True, True, False, False])


def explain_periodicity(periodicity: pl.DataFrame, correlations: pl.DataFrame) -> pl.DataFrame:
    """Fill `explained_by` with the event that most often precedes step-time spikes."""
    spikes_after = correlations.filter((pl.col("effect") == "step_time_spike") & (pl.col("count") / pl.col("of") >= 0.6))
    if periodicity.is_empty() or spikes_after.is_empty():
        return periodicity
    return periodicity.with_columns(explained_by=pl.lit(spikes_after["event"][0]))
