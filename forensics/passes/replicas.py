"""Ranks whose logged loss departs from their peers' for good: replicas that no longer agree.

In data-parallel training every replica holds the same weights, so the ranks' losses at
one step differ only by their data (a local loss) or not at all (a loss already
all-reduced). A rank whose loss sits apart from the others step after step holds
different weights or reads different data: a rank that resumed from a fresh
initialisation or a stale checkpoint, that skipped a gradient sync, or whose GPU
computes wrong numbers. Nothing crashes; the job trains a mixture of models.

Notes:
    * Per step with at least MIN_RANKS ranks logging a loss, each rank's deviation is
      |loss - median of the ranks| / |median|. The usual spread at a step is the ranks'
      median deviation there, smoothed by a rolling median over 2 * WINDOW + 1 steps: the
      data noise of local losses (it grows as the loss falls), zero for replicated ones.
      A step is off for a rank when its deviation is at least SPREAD_FACTOR times the
      usual spread and at least MIN_DEVIATION.
    * A rank has departed when at least MIN_OFF_SHARE of WINDOW consecutive logged steps
      are off for it: persistence separates a replica that diverged from a rank that drew
      a hard batch. Its onset is the first off step of its first such window. The losses
      may meet again later (the replicas' weights still differ, the loss no longer shows
      it); the departure stands.
    * Only finite losses count (NaN has its own detector); duplicates of one (rank,
      step), as a console and a per-rank file both hold, count once.
"""

from __future__ import annotations

import polars as pl

MIN_RANKS = 3
WINDOW = 10
SPREAD_FACTOR = 5.0
MIN_DEVIATION = 1e-3
MIN_OFF_SHARE = 0.8


def _deviations(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per (rank, step) of steps logged by MIN_RANKS ranks: the loss, the ranks' median and the deviation."""
    losses = (
        metrics.filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null() & pl.col("loss").is_finite())
        .sort("file", "line")
        .unique(["rank", "step"], keep="first", maintain_order=True)
        .with_columns(ranks=pl.len().over("step"), median=pl.col("loss").median().over("step"))
        .filter((pl.col("ranks") >= MIN_RANKS) & (pl.col("median") != 0))
    )
    return losses.with_columns(deviation=((pl.col("loss") - pl.col("median")) / pl.col("median")).abs())


def departed_ranks(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per departed rank at its onset: rank, step, file, line, loss, median (the ranks' median loss there)."""
    scored = _deviations(metrics)
    if scored.is_empty():
        return scored.select("rank", "step", "file", "line", "loss", "median")
    # The usual spread around each step: the ranks' median deviation, smoothed over nearby steps.
    spread = (
        scored.group_by("step")
        .agg(pl.col("deviation").median().alias("spread"))
        .sort("step")
        .with_columns(pl.col("spread").rolling_median(2 * WINDOW + 1, center=True, min_samples=1))
    )
    threshold = pl.max_horizontal(SPREAD_FACTOR * pl.col("spread"), pl.lit(MIN_DEVIATION))
    off = (pl.col("deviation") >= threshold).cast(pl.Float64)
    windows = (
        scored.join(spread, on="step")
        .sort("rank", "step")
        .with_columns(
            index=pl.int_range(pl.len()).over("rank"),
            dense=off.rolling_mean(WINDOW).over("rank") >= MIN_OFF_SHARE,
            is_off=off > 0,
        )
    )
    # The first dense window of each rank; its onset is the first off step inside it.
    first_dense = windows.filter("dense").group_by("rank").agg(pl.col("index").min().alias("window_end"))
    onsets = (
        windows.join(first_dense, on="rank")
        .filter(pl.col("is_off") & (pl.col("index") > pl.col("window_end") - WINDOW) & (pl.col("index") <= pl.col("window_end")))
        .sort("rank", "step")
        .unique("rank", keep="first", maintain_order=True)
    )
    return onsets.select("rank", "step", "file", "line", "loss", "median")
