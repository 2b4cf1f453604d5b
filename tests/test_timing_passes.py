"""Periodicity and event->effect correlation on a run with a checkpoint stall every 50 steps."""

from __future__ import annotations

import datetime as dt

import polars as pl

from forensics.passes.correlation import correlate, event_steps, explain_periodicity
from forensics.passes.periodicity import MAX_PERIODOGRAM, find_periodicity, spike_periodogram, step_times
from forensics.schema import FINDINGS, METRICS, conform

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _run(stall_every: int | None, steps: int = 200, logged_step_time: bool = True):
    rows, events, now = [], [], START
    for step in range(1, steps + 1):
        seconds = 1.0 + 0.01 * (step % 3)
        if stall_every and step % stall_every == 0:
            seconds = 9.0
            events.append(now)
        now += dt.timedelta(seconds=seconds)
        rows.append(
            {"file": "rank_0.log", "line": step, "rank": 0, "time": now, "step": step, "step_time_s": seconds if logged_step_time else None}
        )
    metrics = conform(pl.DataFrame(rows), METRICS)
    findings = conform(
        pl.DataFrame(
            {
                "pattern": ["EVT"] * len(events),
                "title": ["checkpoint save"] * len(events),
                "category": ["CHECKPOINT_IO"] * len(events),
                "severity": ["info"] * len(events),
                "role": ["event"] * len(events),
                "time": events,
                "file": ["rank_0.log"] * len(events),
                "line": list(range(len(events))),
            }
        ),
        FINDINGS,
    )
    return metrics, findings


def test_period_found_and_explained_by_checkpoint():
    metrics, findings = _run(stall_every=50)
    correlations = correlate(findings, metrics)
    periodicity = explain_periodicity(find_periodicity(metrics), correlations)
    assert periodicity["period_steps"].to_list() == [50]
    assert periodicity["explained_by"].to_list() == ["checkpoint save"]
    row = correlations.row(0, named=True)
    assert (row["effect"], row["count"], row["of"]) == ("step_time_spike", 4, 4)
    assert row["lift"] > 5


def test_period_from_timestamps_when_step_time_not_logged():
    metrics, _ = _run(stall_every=40, logged_step_time=False)
    assert find_periodicity(metrics)["period_steps"].to_list() == [40]


def test_steady_run_has_no_period_and_no_correlation():
    metrics, findings = _run(stall_every=None)
    assert find_periodicity(metrics).is_empty()
    assert correlate(findings, metrics).is_empty()


def _with_noise(metrics: pl.DataFrame, noisy_steps: list[int]) -> pl.DataFrame:
    noisy = pl.col("step").is_in(noisy_steps)
    return metrics.with_columns(step_time_s=pl.when(noisy).then(7.5).otherwise("step_time_s"))


def test_the_period_holds_when_random_spikes_are_added():
    import random

    metrics, _ = _run(stall_every=50, steps=1000)
    rng = random.Random(7)
    for trial in range(5):
        noise = rng.sample([s for s in range(1, 1001) if s % 50], 15)
        found = find_periodicity(_with_noise(metrics, noise))
        assert found["period_steps"].to_list() == [50], (trial, noise)
        assert found["spikes"][0] == 20 and found["strength"][0] == 1.0


def test_the_spike_periodogram_peaks_at_the_period_under_noise():
    import random

    metrics, _ = _run(stall_every=50, steps=1000)
    noise = random.Random(3).sample([s for s in range(1, 1001) if s % 50], 15)
    gram = spike_periodogram(step_times(_with_noise(metrics, noise)))
    assert gram["period"].min() == 2 and gram["period"].max() == MAX_PERIODOGRAM
    full = gram.filter(pl.col("strength") == 1.0)
    assert full["period"][0] == 50 and full.filter(pl.col("period") == 50)["spikes"][0] == 20
    # Multiples of the period are as strong but hold fewer spikes; divisors hold as many at half the strength.
    best = gram.with_columns(score=pl.col("strength") * pl.col("spikes")).sort("score", descending=True)
    assert best["period"][0] == 50 and best["score"][0] > 1.5 * best["score"][1]


def test_random_spikes_alone_make_no_period():
    import random

    metrics, _ = _run(stall_every=None, steps=1000)
    rng = random.Random(11)
    for _ in range(5):
        assert find_periodicity(_with_noise(metrics, rng.sample(range(1, 1001), 20))).is_empty()


def _with_jitter(metrics: pl.DataFrame, noisy_steps: list[int]) -> pl.DataFrame:
    """Short stalls (3 s against 9 s checkpoint stalls) on `noisy_steps`: everyday jitter."""
    return metrics.with_columns(step_time_s=pl.when(pl.col("step").is_in(noisy_steps)).then(3.0).otherwise("step_time_s"))


def test_the_period_of_tall_stalls_holds_under_frequent_short_jitter():
    """A quarter of all steps jitter: too many spikes for the period to stand out among all of
    them, but the checkpoint stalls are the taller ones."""
    import random

    metrics, _ = _run(stall_every=20, steps=400)
    rng = random.Random(5)
    for trial in range(5):
        jitter = rng.sample([s for s in range(1, 401) if s % 20], 100)
        found = find_periodicity(_with_jitter(metrics, jitter))
        assert (found["period_steps"].to_list(), found["phase"].to_list()) == ([20], [0]), trial


def test_frequent_short_jitter_alone_makes_no_period():
    import random

    metrics, _ = _run(stall_every=None, steps=400)
    rng = random.Random(9)
    for _ in range(5):
        assert find_periodicity(_with_jitter(metrics, rng.sample(range(1, 401), 100))).is_empty()


def test_a_period_is_explained_by_the_event_on_its_phase_when_step_lines_have_no_time():
    """Untimed step prints (`[Rank 0/4] Step 41, ...`) between timestamped save lines: the save
    is placed at the next step of its own stream, and recurs on the period's phase."""
    metrics, _ = _run(stall_every=10, steps=60)
    untimed = metrics.with_columns(time=pl.lit(None, metrics["time"].dtype), line=pl.col("line") * 10)
    saves = [10 * s - 5 for s in range(10, 61, 10)]  # logged just before the step lines of steps 10, 20, ...
    findings = conform(
        pl.DataFrame({"pattern": "EVT", "title": "checkpoint save", "role": "event", "file": "rank_0.log", "line": saves, "rank": 0}),
        FINDINGS,
    )
    periodicity = find_periodicity(untimed)
    events = event_steps(findings, untimed)
    assert sorted(events["step"].to_list()) == [10, 20, 30, 40, 50, 60]
    assert correlate(findings, untimed).is_empty()  # no time: nothing to correlate in time
    explained = explain_periodicity(periodicity, correlate(findings, untimed), events)
    assert explained.select("period_steps", "explained_by").row(0) == (10, "checkpoint save")
