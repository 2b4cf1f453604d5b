"""A job-wide slowdown: every rank's step time rises and stays up; noise and a slow start do not count."""

from __future__ import annotations

import json
import re

import polars as pl

from forensics.ingest.metrics import extract_metrics
from forensics.passes.periodicity import step_times
from forensics.passes.slowdown import data_bound_steps, job_slowdown, slower_before_the_window
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
    # The data-loading mean (1.204 s) covers 60% of the extra 2 s: the stalls were waits for batches.
    assert (row["pattern"], row["category"], row["severity"], row["rank"], row["line"]) == (
        "METRIC012",
        "DATA_PIPELINE",
        "warning",
        None,
        6,
    )
    captures = json.loads(row["captures"])
    assert (captures["mean_s"], captures["data_mean_s"]) == (2.771, 1.204)
    assert "averaged 2.771 s" in row["title"] and "data-loading mean reaches 1.204 s" in row["title"]


def test_earlier_stalls_that_were_not_data_waits_are_a_straggler_finding():
    fed = [re.sub(r"Data (\S+) \(\s*[\d.]+\)", r"Data \1 (0.021)", line) for line in SLOW_BEFORE]
    assert slower_before_the_window(lines_frame(fed))["category"].to_list() == ["STRAGGLER"]


# pytorch/pytorch#680 (real lines): AlexNet on ImageNet read from a hard disk; nearly every second
# of each step is the batch being loaded.
DATA_BOUND_LINES = [
    "Epoch: [0][0/5005]\tTime 48.842 (48.842)\tData 45.054 (45.054)\tLoss 6.9073 (6.9073)\tPrec@1 0.000 (0.000)\tPrec@5 0.000 (0.000)",
    "Epoch: [0][10/5005]\tTime 22.424 (7.498)\tData 22.372 (7.070)\tLoss 6.9065 (6.9074)\tPrec@1 0.000 (0.142)\tPrec@5 1.172 (0.533)",
    "Epoch: [0][20/5005]\tTime 10.452 (5.893)\tData 10.404 (5.632)\tLoss 6.9075 (6.9076)\tPrec@1 0.391 (0.149)\tPrec@5 1.562 (0.446)",
]


def test_steps_that_are_mostly_data_loading_are_data_bound():
    lines = lines_frame(DATA_BOUND_LINES)
    found = data_bound_steps(extract_metrics(lines), lines)
    assert found.select("pattern", "category", "severity", "line").rows() == [("METRIC014", "DATA_PIPELINE", "warning", 2)]
    assert json.loads(found["captures"][0])["share"] > 0.99


def test_a_fed_pipeline_or_a_first_step_alone_is_not_data_bound():
    for texts in (STEADY, DATA_BOUND_LINES[:2]):  # the first step waits for the workers in any run
        lines = lines_frame(texts)
        assert data_bound_steps(extract_metrics(lines), lines).is_empty()


def test_one_rank_waiting_for_data_among_fed_ranks_is_left_to_the_straggler_pass():
    lines = pl.concat([lines_frame(DATA_BOUND_LINES, "rank_0.log", 0), lines_frame(STEADY, "rank_1.log", 1)])
    assert data_bound_steps(extract_metrics(lines), lines).is_empty()


def test_steady_running_means_or_too_few_lines_are_no_finding():
    assert slower_before_the_window(lines_frame(STEADY)).is_empty()
    assert slower_before_the_window(lines_frame(SLOW_BEFORE[:4])).is_empty()


def test_a_data_bound_run_is_a_slow_data_pipeline_not_a_healthy_one(tmp_path):
    from forensics.flow import analyze

    (tmp_path / "train.log").write_text("\n".join(DATA_BOUND_LINES) + "\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.state) == ("DATA_PIPELINE", "slow")
