"""Which logged events (checkpoint saves, evaluation, GC) precede step-time spikes or failures.

Notes:
    Events are findings with role `event` and a timestamp; effects are step-time spikes
    (periodicity.spikes, every rank) and the first initiating finding of each rank.
    For each (event kind, effect) pair: `of` is how many times the event occurred,
    `count` how many of those were followed by the effect within `window_seconds`, and
    `lift` compares that rate with the chance of the effect falling in any window of
    the same length during the run. A period of spikes is explained by the event that
    precedes them in time or, where the step lines carry no timestamps, by the event
    whose next step in its own file falls on the period's phase. The window is three median steps long (capped at
    60 s): a stall caused by a checkpoint shows up in the very next steps. Pairs seen fewer than twice are dropped: one
    coincidence is not a correlation.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.periodicity import spikes, step_times

WINDOW_SECONDS = 60
MIN_COUNT = 2
EXPLAINS_SHARE = 0.6

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


def event_steps(findings: pl.DataFrame, metrics: pl.DataFrame) -> pl.DataFrame:
    """(event, step): each event finding with the step of the next metric line of its own
    stream (file and rank), the step whose time a stall at the event lands in. Needs no timestamps."""
    stream = pl.col("rank").fill_null(-1).alias("stream_rank")
    events = findings.filter(pl.col("role") == "event").select("file", stream, "line", event=pl.col("title")).sort("line")
    stepped = (
        metrics.filter(pl.col("step").is_not_null())
        .join(events, on=["file", "line"], how="anti")  # `saved checkpoint step 10` names a step; it is not one
        .select("file", stream, "line", "step")
        .sort("line")
    )
    if events.is_empty() or stepped.is_empty():
        return pl.DataFrame(schema={"event": pl.String, "step": pl.Int64})
    # Sorted by line overall, so sorted within every (file, rank) group too.
    joined = events.join_asof(stepped, on="line", by=["file", "stream_rank"], strategy="forward", check_sortedness=False)
    return joined.filter(pl.col("step").is_not_null()).select("event", "step").unique()


def explain_periodicity(periodicity: pl.DataFrame, correlations: pl.DataFrame, events: pl.DataFrame | None = None) -> pl.DataFrame:
    """Fill `explained_by` with the event that most often precedes step-time spikes in time,
    else with the event (from `event_steps`) that recurs at the period's phase: at least
    MIN_COUNT times, at least EXPLAINS_SHARE of its occurrences on the phase."""
    if periodicity.is_empty():
        return periodicity
    spikes_after = correlations.filter((pl.col("effect") == "step_time_spike") & (pl.col("count") / pl.col("of") >= EXPLAINS_SHARE))
    if not spikes_after.is_empty():
        return periodicity.with_columns(explained_by=pl.lit(spikes_after["event"][0]))
    if events is None or events.is_empty():
        return periodicity
    period, phase = periodicity["period_steps"][0], periodicity["phase"][0]
    on_phase = (
        events.group_by("event")
        .agg(of=pl.len(), count=(pl.col("step") % period == phase).sum())
        .filter((pl.col("count") >= MIN_COUNT) & (pl.col("count") / pl.col("of") >= EXPLAINS_SHARE))
        .sort(["count", "event"], descending=[True, False])
    )
    return periodicity.with_columns(explained_by=pl.lit(on_phase["event"][0])) if not on_phase.is_empty() else periodicity
