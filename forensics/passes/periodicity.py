"""Step-time spikes that recur every N steps (checkpoints, evaluation, GC, data re-loops).

Notes:
    A spike is a step whose time exceeds the rank's median by more than 4 robust
    deviations (median absolute deviation, floored at 5% of the median so that
    perfectly steady logs do not turn noise into spikes). Candidate periods are the
    gaps between each spike and its next NEIGHBOURS spikes, so a stray spike between two
    periodic ones does not hide the period. A candidate p is judged by its best phase:
    the residue r (step mod p) holding the most spikes. `strength` is the share of the
    logged steps in that phase (steps = phase mod p) that spiked: a real period spikes nearly every time it
    comes round, whatever else spikes in between. The period is the candidate with the
    most spikes in its phase among those with strength >= MIN_STRENGTH and at least
    MIN_SPIKES spikes (a multiple of the period has fewer; half of it has half the
    strength). Chance must not explain the phase: the probability that random spikes
    (at the series' own spike rate) fill it as well, times the number of phases tried,
    stays under MAX_CHANCE. Two spike sets are tried, all spikes and the taller half: a
    checkpoint stall is usually taller than the jitter around it, and in synchronous
    training every rank's jitter reaches every step time, so small spikes can be common
    enough to drown a period that the tall ones show plainly (or to fake half of it);
    both sets count in the chance bound, and the set whose period has the larger
    strength x spikes wins. The series is the job's: each step's median time over the ranks that
    logged it (logging is often rank 0 or the last rank only; the rank that saves a
    checkpoint does not see the stall in its own step timer, the ranks waiting for it do).
"""

from __future__ import annotations

import math

import polars as pl

MIN_SPIKES = 3
MIN_STRENGTH = 0.6
SPIKE_MADS = 4.0
NEIGHBOURS = 4
MAX_CHANCE = 0.01
MAX_CANDIDATES = 64
MAX_PERIODOGRAM = 200

PERIODICITY = {
    "signal": pl.String,
    "rank": pl.Int32,
    "period_steps": pl.Int64,
    "phase": pl.Int64,
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


def job_step_times(times: pl.DataFrame) -> pl.DataFrame:
    """(step, step_time_s): the median over the ranks that logged each step."""
    return times.group_by("step").agg(pl.col("step_time_s").median()).sort("step")


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
    series = job_step_times(times)
    ranks = times["rank"].unique()
    peaks = spikes(series)
    if peaks.height < MIN_SPIKES:
        return pl.DataFrame(schema=PERIODICITY)
    tiers = [peaks, peaks.filter(pl.col("step_time_s") > peaks["step_time_s"].median())]
    found = [best for tier in tiers if (best := _best_period(series["step"], tier["step"], len(tiers))) is not None]
    if not found:
        return pl.DataFrame(schema=PERIODICITY)
    period, phase, strength, hits = max(found, key=lambda best: best[2] * best[3])  # strength x hits
    return pl.DataFrame(
        {
            "signal": ["step_time"],
            "rank": [ranks[0] if ranks.len() == 1 else None],
            "period_steps": [period],
            "phase": [phase],
            "period_seconds": [round(period * float(series["step_time_s"].median()), 2)],
            "strength": [round(strength, 2)],
            "spikes": [hits],
            "explained_by": [None],
        },
        schema=PERIODICITY,
    )


def spike_periodogram(times: pl.DataFrame, max_period: int = MAX_PERIODOGRAM) -> pl.DataFrame:
    """(period, strength, spikes) for every period from 2 to `max_period` steps (at most a third
    of the logged steps): the best phase's share of steps that spiked, as in the Notes, over all
    spikes of the job's series. A true period and its multiples stand out; empty without spikes."""
    series = job_step_times(times) if not times.is_empty() else pl.DataFrame(schema={"step": pl.Int64, "step_time_s": pl.Float64})
    peaks = spikes(series) if series.height else series
    longest = min(max_period, series.height // 3)
    if peaks.is_empty() or longest < 2:
        return pl.DataFrame(schema={"period": pl.Int64, "strength": pl.Float64, "spikes": pl.Int64})
    flagged = series.select("step", spiked=pl.col("step").is_in(peaks["step"].implode()).cast(pl.Int64))
    periods = pl.DataFrame({"period": pl.int_range(2, longest + 1, eager=True).cast(pl.Int64)})
    return (
        flagged.join(periods, how="cross")
        .group_by("period", phase=pl.col("step") % pl.col("period"))
        .agg(pl.col("spiked").sum().alias("spikes"), pl.len().alias("occasions"))
        .with_columns(strength=pl.col("spikes") / pl.col("occasions"))
        .sort("strength", "spikes", descending=True)
        .group_by("period", maintain_order=True)
        .first()
        .select("period", "strength", pl.col("spikes").cast(pl.Int64))
        .sort("period")
    )


def _best_period(logged: pl.Series, spiked: pl.Series, tiers: int = 1) -> tuple[int, int, float, int] | None:
    """(period, phase, strength, spikes in phase) of the strongest period, or None (see Notes);
    `tiers` spike sets are tried in all, and each counts in the chance bound."""
    spike_steps = spiked.sort()
    base_rate = spike_steps.len() / max(logged.len(), 1)
    gaps = pl.concat([spike_steps.shift(-k) - spike_steps for k in range(1, NEIGHBOURS + 1)]).drop_nulls()
    gaps = gaps.filter(gaps >= 2)
    # The true period recurs among neighbour gaps; a long noisy run need not try every gap.
    candidates = gaps.value_counts(name="n").sort(["n", gaps.name], descending=[True, False]).head(MAX_CANDIDATES)[gaps.name].sort()
    tries = max(int(candidates.sum() or 0), 1) * tiers
    best = None
    for period in candidates.to_list():
        phases = (spike_steps % period).value_counts(name="hits").sort(["hits", "step"], descending=[True, False])
        phase, hits = phases.row(0)
        occasions = int((logged % period == phase).sum())
        strength = hits / occasions if occasions else 0.0
        if hits < MIN_SPIKES or strength < MIN_STRENGTH or (best is not None and hits <= best[3]):
            continue
        # Could chance fill this phase? Every phase of every candidate was a try (Bonferroni).
        if binomial_tail(int(hits), occasions, base_rate) * tries < MAX_CHANCE:
            best = (int(period), int(phase), strength, int(hits))
    return best


def binomial_tail(hits: int, trials: int, rate: float) -> float:
    """P(at least `hits` successes in `trials` draws at `rate`)."""
    if rate <= 0.0:
        return 0.0 if hits > 0 else 1.0
    if rate >= 1.0:
        return 1.0
    log_p, log_q = math.log(rate), math.log1p(-rate)
    terms = (
        math.lgamma(trials + 1) - math.lgamma(k + 1) - math.lgamma(trials - k + 1) + k * log_p + (trials - k) * log_q
        for k in range(hits, trials + 1)
    )
    return min(1.0, sum(math.exp(t) for t in terms))
