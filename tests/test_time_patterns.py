"""Failure intervals and hour-of-day clustering over a batch index with planted patterns."""

from __future__ import annotations

import datetime as dt
import random

import polars as pl

from forensics.batch.fleet import INDEX_SCHEMA, render_fleet
from forensics.batch.time_patterns import failure_intervals, hour_of_day_cluster

T0 = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)


def _index(rows: list[tuple[str, dt.datetime | None]]) -> pl.DataFrame:
    """A batch index (every column `forensics batch` writes) with these categories and start times."""
    given = pl.DataFrame(
        {"id": [f"inc-{i:04d}" for i in range(len(rows))], "category": [c for c, _ in rows], "start": [s for _, s in rows]},
        schema={"id": pl.String, "category": pl.String, "start": pl.Datetime("us", "UTC")},
    )
    rest = [pl.lit(None, dtype).alias(name) for name, dtype in INDEX_SCHEMA.items() if name not in given.columns]
    return given.with_columns(rest).with_columns(culprit_hosts=pl.lit([], pl.List(pl.String)))


def test_a_nightly_cluster_is_found_and_uniform_hours_are_not():
    rnd = random.Random(4)
    night = [("HARDWARE", T0 + dt.timedelta(days=d, hours=rnd.uniform(2, 5.99))) for d in range(30)]
    spread = [("NETWORK", T0 + dt.timedelta(days=d, hours=rnd.uniform(0, 23.99))) for d in range(30)]
    cluster = hour_of_day_cluster(_index(night + spread))
    assert cluster is not None and 1 <= cluster["first_hour"] <= 2 and cluster["failures"] >= 30
    assert (
        hour_of_day_cluster(_index(spread + [("UNKNOWN", T0 + dt.timedelta(days=d, hours=rnd.uniform(0, 23.99))) for d in range(30)]))
        is None
    )


def test_healthy_runs_and_undated_failures_do_not_count():
    rows = [("NO_FAILURE", T0 + dt.timedelta(days=d, hours=3)) for d in range(40)] + [("CUDA_OOM", None)] * 5
    index = _index(rows)
    assert hour_of_day_cluster(index) is None and failure_intervals(index).is_empty()
    fleet = render_fleet(index.with_columns(state=pl.lit("crashed"), culprit_hosts=pl.lit([], pl.List(pl.String))))
    assert "5 failures; 40 runs were healthy" in fleet and "5 failures carry no start time" in fleet


def test_intervals_tell_regular_from_random_failures():
    rnd = random.Random(9)
    weekly = [("PROCESS_KILLED", T0 + dt.timedelta(days=7 * w, hours=1)) for w in range(10)]
    clock, poisson = T0, []
    for _ in range(40):
        clock += dt.timedelta(hours=rnd.expovariate(1 / 30))
        poisson.append(("NETWORK", clock))
    table = {r["category"]: r for r in failure_intervals(_index(weekly + poisson)).iter_rows(named=True)}
    assert abs(table["PROCESS_KILLED"]["mtbf_h"] - 168) < 1e-6 and table["PROCESS_KILLED"]["cv"] < 0.01
    assert 0.6 < table["NETWORK"]["cv"] < 1.5 and table["NETWORK"]["failures"] == 40
