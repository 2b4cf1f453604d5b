"""Log-based straggler detection: persistent slowness is flagged, one slow step is not."""

from __future__ import annotations

import datetime as dt

import polars as pl

from forensics.passes.stragglers import find_stragglers
from forensics.schema import METRICS, conform


def _metrics(step_time, steps: int = 20) -> pl.DataFrame:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [
        {"file": f"rank_{r}.log", "line": s, "rank": r, "step": s, "step_time_s": step_time(r, s), "time": start + dt.timedelta(seconds=s)}
        for r in range(4)
        for s in range(1, steps + 1)
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
    assert "data time" in table["evidence"][0]
    assert table["slowdown"][0] > 1.5


def test_a_straggler_from_the_start_has_its_onset_at_the_first_step_and_a_cost():
    table, findings = find_stragglers(_metrics(lambda r, s: 1.5 if r == 2 else 1.0))
    row = table.row(0, named=True)
    assert (row["rank"], row["onset_step"], row["steps"]) == (2, 1, 20)
    # Every step took 0.5 s longer than the peers' median 1.0 s: 10 s over a 20 s job.
    assert (row["cost_s"], row["cost_share"]) == (10.0, 0.5)
    assert "over steps 1-20" in findings["text"][0]


def test_a_rank_that_degrades_mid_run_is_found_from_its_onset():
    # Rank 3 is as fast as its peers for 12 steps, then 1.8x slower to the end (a disk filling up):
    # over the whole run its slow share is 60%, its median ratio under the bar.
    table, _ = find_stragglers(_metrics(lambda r, s: 1.8 if (r == 3 and s >= 13) else 1.0 + 0.01 * ((r + s) % 3), steps=30))
    row = table.row(0, named=True)
    assert (row["rank"], row["onset_step"], row["end_step"]) == (3, 13, 30)
    assert row["slowdown"] >= 1.7 and row["steps"] >= 18


def test_a_rank_slow_for_a_while_in_the_middle_is_an_episode_with_an_end():
    # A GPU that throttles from step 41 to 70 of 100, then recovers.
    table, findings = find_stragglers(_metrics(lambda r, s: 1.5 if (r == 1 and 41 <= s <= 70) else 1.0, steps=100))
    row = table.row(0, named=True)
    assert (row["rank"], row["onset_step"], row["end_step"]) == (1, 41, 70)
    assert (row["cost_s"], row["cost_share"]) == (15.0, 0.15)
    assert "over steps 41-70" in findings["text"][0]


def test_a_few_slow_steps_at_the_end_are_not_an_episode():
    table, _ = find_stragglers(_metrics(lambda r, s: 1.5 if (r == 0 and s >= 25) else 1.0, steps=30))
    assert table.is_empty()


def test_noise_that_slows_every_rank_now_and_then_has_no_onset():
    table, findings = find_stragglers(_metrics(lambda r, s: 1.5 if (r + s) % 4 == 0 else 1.0))
    assert table.is_empty() and findings.is_empty()
