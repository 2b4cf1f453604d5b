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
    A log excerpt may show only fast steps of a run that was slow before it. The
    AverageMeter lines of the PyTorch ImageNet example and its many descendants print each
    value with its running mean, `Time 0.783 (2.771)  Data 0.006 (1.204)`: a mean far above
    every current value the excerpt shows says the earlier steps were much slower
    (METRIC012, STRAGGLER, a warning). The finding cites the file's last such line and
    says how much of the extra time the running data-loading mean accounts for; like
    METRIC006 it names no rank (every rank of a synchronous job shows the same means).
    When that data-loading mean covers at least DATA_BOUND of the extra time, the stalls
    were waits for input batches and the finding is DATA_PIPELINE.
    A job whose steps are mostly waits for data is slow however steady it runs: METRIC014
    (DATA_PIPELINE, a warning) when every stream (file, rank) that logs data-loading times
    spends at least DATA_BOUND of its step time on them, at the median over its metric rows
    after the first (the first step waits for every worker to start in any run), over at
    least MIN_DATA_ROWS. One finding per stream, citing its first row judged. Where only
    some ranks wait for data, those ranks are stragglers (stragglers.py).
"""

from __future__ import annotations

import polars as pl

from forensics.passes.periodicity import job_step_times
from forensics.schema import FINDINGS, conform, empty

SLOWDOWN = 3.0
SMOOTH = 5
PERSIST = 5
MIN_STEPS = 20
# `Time 0.783 (2.771)` / `Time  0.412 ( 0.795)`: a current value and its running mean, in seconds.
AVERAGE_METER_TIME = r"\bTime:?\s+(\d+\.?\d*)\s+\(\s*(\d+\.?\d*)\)"
AVERAGE_METER_DATA = r"\bData:?\s+(\d+\.?\d*)\s+\(\s*(\d+\.?\d*)\)"
SLOWER_BEFORE = 2.5  # the running mean over the current values' median
MIN_METER_LINES = 5
DATA_BOUND = 0.5  # the share of a step spent waiting for its batch
MIN_DATA_ROWS = 2
# Findings that say the job ran slow rather than failed, whatever their category.
SLOWDOWN_PATTERNS = frozenset({"METRIC006", "METRIC012", "METRIC014"})


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


def slower_before_the_window(lines: pl.DataFrame) -> pl.DataFrame:
    """METRIC012 when an AverageMeter's running mean step time is SLOWER_BEFORE times the
    median of the current values shown (at least MIN_METER_LINES of them in a file)."""
    text = pl.col("text")
    meters = lines.filter(text.str.contains(AVERAGE_METER_TIME)).with_columns(
        current=text.str.extract(AVERAGE_METER_TIME, 1).cast(pl.Float64, strict=False),
        mean=text.str.extract(AVERAGE_METER_TIME, 2).cast(pl.Float64, strict=False),
        data_mean=text.str.extract(AVERAGE_METER_DATA, 2).cast(pl.Float64, strict=False),
    )
    if meters.height < MIN_METER_LINES:
        return empty(FINDINGS)
    streams = (
        meters.sort("file", "line")
        .group_by("file", maintain_order=True)  # ranks in step share one step time; the last line's mean is the latest
        .agg(
            pl.len().alias("shown"),
            pl.col("current").median().alias("current_s"),
            pl.col("mean").last().alias("mean_s"),
            pl.col("data_mean").last().alias("data_mean_s"),
            pl.col("line").last(),
            pl.col("time").last(),
            pl.col("text").last(),
        )
        .filter(pl.col("shown") >= MIN_METER_LINES, pl.col("mean_s") >= SLOWER_BEFORE * pl.col("current_s"), pl.col("current_s") > 0)
    )
    if streams.is_empty():
        return empty(FINDINGS)
    worst = streams.sort("mean_s", descending=True).row(0, named=True)
    excess = worst["mean_s"] - worst["current_s"]
    waits = meters.select(pl.col("data_mean").drop_nulls().max()).item()
    data_share = f"; the running data-loading mean reaches {waits:g} s, {waits / excess:.0%} of the extra time" if waits else ""
    title = (
        f"Earlier steps were much slower than those shown: step time averaged {worst['mean_s']:g} s, "
        f"{worst['mean_s'] / worst['current_s']:.1f}x the median {worst['current_s']:g} s of the {worst['shown']} lines shown{data_share}"
    )
    found = (
        streams.sort("mean_s", descending=True)
        .head(1)
        .select(
            "file",
            "line",
            "time",
            "text",
            pattern=pl.lit("METRIC012"),
            title=pl.lit(title),
            category=pl.lit("DATA_PIPELINE" if waits and waits >= DATA_BOUND * excess else "STRAGGLER"),
            severity=pl.lit("warning"),
            role=pl.lit("symptom"),
            captures=pl.struct(
                mean_s=pl.col("mean_s"), current_s=pl.col("current_s"), data_mean_s=pl.lit(waits, pl.Float64)
            ).struct.json_encode(),
        )
    )
    return conform(found, FINDINGS)


def data_bound_steps(metrics: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """METRIC014 per stream whose steps are mostly data loading (see module notes)."""
    timed = metrics.filter(pl.col("step_time_s") > 0, pl.col("data_time_s").is_not_null()).sort("file", "line")
    judged = timed.filter(pl.int_range(pl.len()).over("file", pl.col("rank").fill_null(-1)) > 0)
    bound = (
        judged.group_by("file", pl.col("rank").fill_null(-1).alias("_stream"), maintain_order=True)
        .agg(
            rows=pl.len(),
            share=(pl.col("data_time_s") / pl.col("step_time_s")).median(),
            step_s=pl.col("step_time_s").median(),
            data_s=pl.col("data_time_s").median(),
            line=pl.col("line").first(),
        )
        .filter(pl.col("rows") >= MIN_DATA_ROWS, pl.col("share") >= DATA_BOUND)
    )
    if bound.is_empty() or bound.height < timed.select("file", pl.col("rank").fill_null(-1)).n_unique():
        return empty(FINDINGS)  # some ranks are fed in time: a slow rank is the straggler pass's to name
    cited = bound.join(lines.select("file", "line", "rank", "time", "text", "host"), on=["file", "line"], how="left")
    found = cited.select(
        "file",
        "line",
        "rank",
        "time",
        "text",
        "host",
        pattern=pl.lit("METRIC014"),
        title=pl.format(
            "Steps wait for data: loading takes {}% of each step (median {} s of {} s)",
            (pl.col("share") * 100).round(0).cast(pl.Int64),
            pl.col("data_s").round(3),
            pl.col("step_s").round(3),
        ),
        category=pl.lit("DATA_PIPELINE"),
        severity=pl.lit("warning"),
        role=pl.lit("initiating"),
        captures=pl.struct(share=pl.col("share").round(3), data_s="data_s", step_s="step_s", rows="rows").struct.json_encode(),
    )
    return conform(found, FINDINGS)
