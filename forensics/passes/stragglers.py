"""Ranks whose logged step times are persistently slower than their peers'.

Notes:
    Each rank's step time is compared with the median of all ranks at the same step; a
    step is slow above SLOW_STEP_RATIO. A span of steps makes a rank a straggler when its
    median ratio is at least MIN_RATIO and at least MIN_SLOW_SHARE of its steps are slow:
    persistence separates a slow component from one noisy step. The spans tried are the
    whole run (at least MIN_COMMON_STEPS steps) and each episode, a run of steps where
    the slow share of a centred EPISODE_WINDOW is dense (at least MIN_EPISODE_STEPS
    steps: a GPU that throttles for a while, a disk that fills up mid-run). Kept is the
    shortest span whose cost is at least SAME_COST of the costliest; onset and end are its
    first and last slow steps. The cost is the
    time the rank's excess added to the job over the span (in synchronous training
    everyone waits for it), in seconds and as a share of the peers' median time summed
    over all common steps. In synchronous data-parallel training every rank's
    wall-clock step time is set by the slowest, so this only sees stragglers when ranks
    log their own compute or data-loading time (`data_time`): a rank that spends 0.1 s
    more per step loading data slows every step by that much. Traces and GPU health
    see more. Needs at least two ranks with five common steps.
"""

from __future__ import annotations

import polars as pl

from forensics.passes.periodicity import step_times
from forensics.schema import FINDINGS, conform, empty

MIN_RATIO = 1.2
SLOW_STEP_RATIO = 1.1
MIN_SLOW_SHARE = 0.6
MIN_COMMON_STEPS = 5
EPISODE_WINDOW = 5
MIN_EPISODE_STEPS = 10
SAME_COST = 0.9

SIGNALS = ("step_time_s", "data_time_s")
STRAGGLERS = {
    "rank": pl.Int32, "slowdown": pl.Float64, "slow_share": pl.Float64, "steps": pl.Int64, "onset_step": pl.Int64,
    "end_step": pl.Int64, "cost_s": pl.Float64, "cost_share": pl.Float64, "evidence": pl.String,
}  # fmt: skip


def _compare(times: pl.DataFrame, signal: str) -> pl.DataFrame:
    """Per (rank, step): how much longer the step would be without this rank's excess.

    ratio = 1 + (rank's value - peers' median value) / peers' median step time, so for
    `step_time_s` it is the plain ratio to the median, and for a component such as
    `data_time_s` it is the share of a step that this rank alone spends extra.
    """
    return (
        times.filter(pl.col(signal).is_not_null())
        .with_columns(
            peers=pl.len().over("step"),
            value_median=pl.col(signal).median().over("step"),
            step_median=pl.col("step_time_s").median().over("step"),
        )
        .filter(pl.col("peers") >= 2)
        .with_columns(
            ratio=1 + (pl.col(signal) - pl.col("value_median")) / pl.col("step_median"),
            signal=pl.lit(signal),
        )
    )


def _spans(compared: pl.DataFrame) -> pl.DataFrame:
    """Candidate slow spans of each (rank, signal), labelled `span`: 0 is the whole run; 1.. are
    the runs of steps where the centred EPISODE_WINDOW-step share of slow steps is at least
    MIN_SLOW_SHARE. Adds `job_s`, the peers' median step time summed over all common steps."""
    group = ["rank", "signal"]
    slow = (pl.col("ratio") > SLOW_STEP_RATIO).cast(pl.Float64)
    ordered = compared.sort("rank", "signal", "step").with_columns(
        job_s=pl.col("step_median").sum().over(group),
        dense=(slow.rolling_mean(EPISODE_WINDOW, center=True, min_samples=1) >= MIN_SLOW_SHARE).over(group),
    )
    change = (pl.col("dense") != pl.col("dense").shift(1)).fill_null(True)
    episodes = ordered.with_columns(span=change.cum_sum().over(group).cast(pl.Int64)).filter("dense")
    return pl.concat([ordered.with_columns(span=pl.lit(0, pl.Int64)), episodes]).drop("dense")


def find_stragglers(metrics: pl.DataFrame, times: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stragglers table, FINDINGS) from per-rank step times and data-loading times."""
    times = (step_times(metrics) if times is None else times).filter(pl.col("rank").is_not_null())
    if times.is_empty() or times["rank"].n_unique() < 2:
        return pl.DataFrame(schema=STRAGGLERS), empty(FINDINGS)
    compared = pl.concat([_compare(times, signal).with_columns(value=pl.col(signal)) for signal in SIGNALS], how="diagonal_relaxed")
    slow = pl.col("ratio") > SLOW_STEP_RATIO
    per_rank = (
        _spans(compared)
        .group_by("rank", "signal", "span")
        .agg(
            slowdown=pl.col("ratio").median(),
            slow_share=slow.mean(),
            steps=pl.len().cast(pl.Int64),
            onset_step=pl.col("step").filter(slow).min(),
            end_step=pl.col("step").filter(slow).max(),
            cost_s=((pl.col("ratio") - 1).clip(lower_bound=0) * pl.col("step_median")).sum(),
            job_s=pl.col("job_s").first(),
            file=pl.col("file").first(),
            line=pl.col("line").sort_by("ratio").last(),
            median_s=pl.col("value").median(),
            peer_median_s=pl.col("value_median").median(),
        )
        .filter(
            (pl.col("steps") >= pl.when(pl.col("span") == 0).then(MIN_COMMON_STEPS).otherwise(MIN_EPISODE_STEPS))
            & (pl.col("slowdown") >= MIN_RATIO)
            & (pl.col("slow_share") >= MIN_SLOW_SHARE)
        )
        # The tightest span that holds nearly all of the rank's cost: the whole run also
        # counts an episode's cost, plus whatever stray slow steps lie outside it.
        .filter(pl.col("cost_s") >= SAME_COST * pl.col("cost_s").max().over("rank"))
        .sort(["steps", "cost_s"], descending=[False, True])
        .unique("rank", keep="first", maintain_order=True)
    )
    if per_rank.is_empty():
        return pl.DataFrame(schema=STRAGGLERS), empty(FINDINGS)
    per_rank = per_rank.with_columns(
        cost_share=pl.col("cost_s") / pl.col("job_s"),
        evidence=pl.format(
            "median {} {}s vs {}s for peers over steps {}-{}; slower on {}% of them",
            pl.col("signal").str.replace("_s$", "").str.replace("_", " "),
            pl.col("median_s").round(3),
            pl.col("peer_median_s").round(3),
            pl.col("onset_step"),
            pl.col("end_step"),
            (pl.col("slow_share") * 100).round(0).cast(pl.Int64),
        ),
    )
    table = per_rank.select(list(STRAGGLERS)).with_columns(
        pl.col("slowdown", "slow_share", "cost_share").round(3), pl.col("cost_s").round(2)
    )
    cited = metrics.select("file", "line", "time").unique(["file", "line"])
    findings = per_rank.join(cited, on=["file", "line"], how="left").with_columns(
        pattern=pl.lit("STRAG001"),
        title=pl.lit("Rank persistently slower than its peers (logged step times)"),
        category=pl.lit("STRAGGLER"),
        severity=pl.lit("warning"),
        role=pl.lit("initiating"),
        text=pl.format("rank {} is {}x slower than the median rank: {}", pl.col("rank"), pl.col("slowdown").round(2), pl.col("evidence")),
        captures=pl.struct(
            slowdown=pl.col("slowdown").round(3),
            slow_share=pl.col("slow_share").round(3),
            steps="steps",
            onset_step="onset_step",
            end_step="end_step",
            cost_s=pl.col("cost_s").round(2),
            cost_share=pl.col("cost_share").round(3),
        ).struct.json_encode(),
    )
    return table, conform(findings, FINDINGS)
