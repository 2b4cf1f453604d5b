"""A job-wide slowdown: every rank's step time rises and stays up.

Notes:
    In synchronous training one slow component slows every rank alike, so a rank-by-rank
    comparison (stragglers.py) sees nothing while the job crawls. The series here is the
    job's step time (periodicity.job_step_times: each step's median over ranks). Its
    baseline is the median of the first half of the logged steps; the slowdown is the run
    of steps reaching the end of the log whose running median (SMOOTH steps) is at least
    SLOWDOWN times the baseline, at least PERSIST steps long and starting in the second
    half (a run slow from the start has no normal speed to compare with). Its onset is
    the first step of that run; the running median is centred, so that is the first slow
    step. Needs MIN_STEPS logged steps. The finding (METRIC006,
    STRAGGLER, a warning) names no rank: which rank holds the others up is for the
    stacks, traces or GPU health to say.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.periodicity import job_step_times
from forensics.schema import FINDINGS, conform, empty

SLOWDOWN = 3.0
SMOOTH = 5
PERSIST = 5
MIN_STEPS = 20


def job_slowdown(times: pl.DataFrame, metrics: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """METRIC006 for a job whose step time rose SLOWDOWN-fold and stayed up; empty otherwise."""
    series = job_step_times(times) if not times.is_empty() else times
    if series.height < MIN_STEPS:
        return empty(FINDINGS)
    baseline = float(series.head(series.height // 2)["step_time_s"].median())
    slow = pl.col("step_time_s").rolling_median(window_size=SMOOTH, min_samples=1, center=True) >= SLOWDOWN * baseline
    runs = series.with_columns(index=pl.int_range(pl.len()), slow=slow.fill_null(False)).with_columns(
        run=(pl.col("slow") != pl.col("slow").shift(1)).fill_null(True).cum_sum()
    )
    tail = runs.filter(pl.col("run") == pl.col("run").max())
    if not tail["slow"][0] or tail.height < PERSIST or tail["index"][0] < series.height // 2:
        return empty(FINDINGS)
    onset = int(tail["step"][0])
    slowed = float(tail["step_time_s"].median())
    # Cite the onset step's own line: the first rank's metric line of that step.
    cited = (
        metrics.filter(pl.col("step") == onset)
        .sort([pl.col("time").is_null(), "time", "file", "line"])
        .head(1)
        .select("file", "line", "time")
        .join(lines.select("file", "line", "text", "host"), on=["file", "line"], how="left")
    )
    found = cited.with_columns(
        pattern=pl.lit("METRIC006"),
        title=pl.lit(f"The whole job slowed down: step time rose {slowed / baseline:.0f}x from step {onset} and stayed up"),
        category=pl.lit("STRAGGLER"),
        severity=pl.lit("warning"),
        role=pl.lit("symptom"),
        captures=pl.struct(
            onset_step=pl.lit(onset), baseline_s=pl.lit(round(baseline, 4)), slowed_s=pl.lit(round(slowed, 4))
        ).struct.json_encode(),
    )
    return conform(found, FINDINGS)
