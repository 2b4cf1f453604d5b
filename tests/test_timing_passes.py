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
        rows.append({"file": "rank_0.log", "line": step, "rank": 0, "time": now, "step": step,
                     "step_time_s": seconds if logged_step_time else None})
    metrics = conform(pl.DataFrame(rows), METRICS)
    findings = conform(
        pl.DataFrame({"pattern": ["EVT"] * len(events), "title": ["checkpoint save"] * len(events),
                      "category": ["CHECKPOINT_IO"] * len(events), "severity": ["info"] * len(events),
                      "role": ["event"] * len(events), "time": events, "file": ["rank_0.log"] * len(events),
                      "line": list(range(len(events)))}),
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
