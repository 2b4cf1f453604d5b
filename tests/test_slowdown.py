"""A job-wide slowdown: every rank's step time rises and stays up; noise and a slow start do not count."""

from __future__ import annotations

import json

import polars as pl

from forensics.ingest.metrics import extract_metrics
from forensics.passes.periodicity import step_times
from forensics.passes.slowdown import job_slowdown, slower_before_the_window
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


# Horovod#675 (real lines): four ranks at 0.6-0.8 s a step whose running means say 2.771 s.
SLOW_BEFORE = [
    "[GPU rank 1] Epoch: [1][30786/34406]    Time 0.783 (2.771)      Data 0.006 (1.204)      Loss 58.0583 (55.2676)",
    "[GPU rank 3] Epoch: [1][30786/34406]    Time 0.782 (2.771)      Data 0.118 (0.686)      Loss 43.3951 (55.5225)",
    "[GPU rank 0] Epoch: [1][30786/34406]    Time 0.782 (2.771)      Data 0.003 (0.416)      Loss 47.8849 (55.1309)",
    "[GPU rank 2] Epoch: [1][30786/34406]    Time 0.782 (2.771)      Data 0.017 (0.021)      Loss 50.1987 (55.5940)",
    "[GPU rank 3] Epoch: [1][30787/34406]    Time 0.636 (2.771)      Data 0.003 (0.686)      Loss 68.1900 (55.5229)",
    "[GPU rank 2] Epoch: [1][30787/34406]    Time 0.636 (2.771)      Data 0.003 (0.021)      Loss 61.7113 (55.5942)",
]
# The PyTorch ImageNet example's ProgressMeter, steady: current values and means agree.
STEADY = [
    f"Epoch: [0][{i:4d}/5005]\tTime  0.41{i % 10} ( 0.452)\tData  0.001 ( 0.030)\tLoss 6.9043e+00 (6.9122e+00)" for i in range(10, 20)
]


def test_running_means_far_above_the_steps_shown_say_earlier_steps_were_slow():
    found = slower_before_the_window(lines_frame(SLOW_BEFORE))
    row = found.row(0, named=True)
    assert (row["pattern"], row["category"], row["severity"], row["rank"], row["line"]) == ("METRIC012", "STRAGGLER", "warning", None, 6)
    captures = json.loads(row["captures"])
    assert (captures["mean_s"], captures["data_mean_s"]) == (2.771, 1.204)
    assert "averaged 2.771 s" in row["title"] and "data-loading mean reaches 1.204 s" in row["title"]


def test_steady_running_means_or_too_few_lines_are_no_finding():
    assert slower_before_the_window(lines_frame(STEADY)).is_empty()
    assert slower_before_the_window(lines_frame(SLOW_BEFORE[:4])).is_empty()
