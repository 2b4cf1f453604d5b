"""A job-wide slowdown: every rank's step time rises and stays up; noise and a slow start do not count."""

from __future__ import annotations

import json

import polars as pl

from forensics.ingest.metrics import extract_metrics
from forensics.passes.periodicity import step_times
from forensics.passes.slowdown import job_slowdown
from tests.conftest import lines_frame


def _job(step_time, steps: int = 40, ranks: int = 4):
    """Every rank logs the investigation protocol's line with the same (synchronized) step time."""
    frames = [
        lines_frame(
            [f"[Rank {r}/{ranks}] Step {s}, Loss: 2.0, step_time: {step_time(s) * 1000:.0f}ms" for s in range(1, steps + 1)],
            file=f"rank_{r}.log",
            rank=r,
        )
        for r in range(ranks)
    ]
    lines = pl.concat(frames)
    metrics = extract_metrics(lines)
    return job_slowdown(step_times(metrics), metrics, lines)


def test_a_job_that_crawls_from_step_30_has_its_onset_there():
    found = _job(lambda s: 0.5 if s >= 30 else 0.05 + 0.002 * (s % 3))
    row = found.row(0, named=True)
    assert (row["pattern"], row["category"], row["severity"], row["rank"]) == ("METRIC006", "STRAGGLER", "warning", None)
    assert json.loads(row["captures"])["onset_step"] == 30
    assert row["text"].startswith("[Rank 0/4] Step 30,")  # the onset step's own line, verbatim


def test_steady_noisy_slow_from_the_start_or_a_short_tail_is_no_slowdown():
    assert _job(lambda s: 0.05 + 0.03 * (s % 4 == 0)).is_empty()
    assert _job(lambda s: 0.5).is_empty()
    assert _job(lambda s: 0.5 if s >= 38 else 0.05).is_empty()
    assert _job(lambda s: 0.5 if 20 <= s <= 30 else 0.05).is_empty()  # it recovered
