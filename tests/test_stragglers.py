"""Log-based straggler detection: persistent slowness is flagged, one slow step is not."""

from __future__ import annotations

import datetime as dt

import polars as pl

from forensics.passes.stragglers import find_stragglers
from forensics.schema import METRICS, conform


def _metrics(step_time) -> pl.DataFrame:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [
        {"file": f"rank_{r}.log", "line": s, "rank": r, "step": s, "step_time_s": step_time(r, s), "time": start + dt.timedelta(seconds=s)}
        for r in range(4)
        for s in range(1, 21)
    ]
    return conform(pl.DataFrame(rows), METRICS)


def test_persistently_slow_rank_is_a_straggler():
    table, findings = find_stragglers(_metrics(lambda r, s: 1.6 if r == 2 else 1.0))
    assert table["rank"].to_list() == [2]
    assert table["slowdown"][0] == 1.6
    assert findings.select("rank", "category", "role").row(0) == (2, "STRAGGLER", "initiating")


def test_one_slow_step_is_not_a_straggler():
    table, findings = find_stragglers(_metrics(lambda r, s: 5.0 if (r, s) == (1, 7) else 1.0))
    assert table.is_empty() and findings.is_empty()


def test_single_rank_cannot_straggle():
    metrics = _metrics(lambda r, s: 1.0).filter(pl.col("rank") == 0)
    assert find_stragglers(metrics)[0].is_empty()


def test_slow_data_loading_is_found_when_synchronized_step_times_are_equal():
    metrics = _metrics(lambda r, s: 0.13).with_columns(data_time_s=pl.when(pl.col("rank") == 1).then(0.11).otherwise(0.005))
    table, findings = find_stragglers(metrics)
    assert table["rank"].to_list() == [1]
    assert "data_time" in table["evidence"][0]
    assert table["slowdown"][0] > 1.5
