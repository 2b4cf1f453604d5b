"""Periodicity and event->effect correlation on a run with a checkpoint stall every 50 steps."""

from __future__ import annotations

import datetime as dt

import polars as pl

from forensics.passes.correlation import correlate, explain_periodicity
from forensics.passes.periodicity import find_periodicity
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


def test_random_spikes_alone_make_no_period():
    import random

    metrics, _ = _run(stall_every=None, steps=1000)
    rng = random.Random(11)
    for _ in range(5):
        assert find_periodicity(_with_noise(metrics, rng.sample(range(1, 1001), 20))).is_empty()
