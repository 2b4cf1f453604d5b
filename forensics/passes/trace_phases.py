"""Per-rank time in each annotated phase and in collectives, from profiler traces; the rank whose phase runs long.

Works on any trace, CPU-only ones (gloo, no GPU stream) included: what it reads are the
CPU-side `user_annotation` spans (`record_function("data")`, `Optimizer.step#SGD.step`,
`enumerate(DataLoader)#…`) and the collectives that `collective_alignment` matches.

Notes:
    * A phase is an annotation name; `ProfilerStep#N` spans are the steps and the
      collectives' own spans (`gloo:`, `nccl:`…) are counted under `collectives`.
      Nested annotations each keep their own inclusive time; they are not summed.
    * Each span belongs to the profiler step it starts in. Without ProfilerSteps the
      whole trace is one step.
    * Per (phase, step) the ranks are compared as `stragglers` compares logged times:
      excess = (rank's time - median rank's time) / median step time, the share of a
      step this rank alone adds. A rank is slow in an annotated phase when its median
      excess over the steps is at least MIN_RATIO - 1 and at least MIN_SLOW_SHARE of
      its steps exceed SLOW_STEP_RATIO - 1. Needs two ranks.
    * Collective time reads the other way round (the mirror effect): the rank that
      arrives last waits least, while its peers' collectives absorb its delay. Long
      collective time is never blamed on the rank that shows it.
"""

from __future__ import annotations

import polars as pl

from forensics.ingest.traces import TraceLoad
from forensics.passes.collective_alignment import collective_kernels
from forensics.passes.stragglers import MIN_RATIO, MIN_SLOW_SHARE, SLOW_STEP_RATIO
from forensics.schema import FINDINGS, conform, empty

COLLECTIVES = "collectives"
SAME_EXCESS = 0.9
_STEP = r"^ProfilerStep#(\d+)$"
_COLLECTIVE_SPAN = r"^(?:gloo|nccl|mpi|ucc|xccl):"
PHASES = {
    "rank": pl.Int32, "file": pl.String, "phase": pl.String, "kind": pl.String, "calls": pl.Int64, "steps": pl.Int64,
    "per_step_ms": pl.Float64, "peer_median_ms": pl.Float64, "excess_share": pl.Float64, "slow_share": pl.Float64,
}  # fmt: skip


def _steps(load: TraceLoad) -> pl.DataFrame:
    """The trace's ProfilerStep spans (step, start, end); one step over the whole trace when there are none."""
    steps = (
        load.events.filter((pl.col("cat") == "user_annotation") & pl.col("name").str.contains(_STEP))
        .select(pl.col("name").str.extract(_STEP, 1).cast(pl.Int64).alias("step"), pl.col("ts").alias("start"), pl.col("end"))
        .sort("start")
    )
    if steps.is_empty():
        return pl.DataFrame({"step": [None], "start": [load.events["ts"].min()], "end": [load.events["end"].max()]}).cast(
            {"step": pl.Int64, "start": pl.Int64, "end": pl.Int64}
        )
    return steps


def _spans(loads: list[TraceLoad]) -> pl.DataFrame:
    """Every ranked trace's annotation and collective spans: rank, file, phase, kind, ts, dur."""
    collectives = collective_kernels(loads)
    frames = []
    for t in loads:
        if t.rank is None or t.events.is_empty():
            continue
        annotations = t.events.filter(
            (pl.col("cat") == "user_annotation") & ~pl.col("name").str.contains(_STEP) & ~pl.col("name").str.contains(_COLLECTIVE_SPAN)
        ).select(pl.col("name").alias("phase"), pl.lit("annotation").alias("kind"), "ts", "dur")
        own = collectives.filter(pl.col("file") == str(t.path)).select(
            pl.lit(COLLECTIVES).alias("phase"), pl.lit("collective").alias("kind"), "ts", "dur"
        )
        spans = pl.concat([annotations, own]).sort("ts")
        steps = _steps(t)
        in_step = spans.join_asof(steps, left_on="ts", right_on="start", strategy="backward").filter(
            pl.col("start").is_not_null() & (pl.col("ts") < pl.col("end"))
        )
        frames.append(
            in_step.select(
                pl.lit(t.rank, pl.Int32).alias("rank"),
                pl.lit(str(t.path)).alias("file"),
                "phase",
                "kind",
                pl.col("step").fill_null(-1),
                "dur",
                (pl.col("end") - pl.col("start")).alias("step_us"),
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame()


def phase_times(loads: list[TraceLoad]) -> pl.DataFrame:
    """One row per (rank, phase): calls, time per profiled step, the median rank's, and how far this rank exceeds it."""
    spans = _spans(loads)
    if spans.is_empty():
        return pl.DataFrame(schema=PHASES)
    per_step = spans.group_by("rank", "file", "phase", "kind", "step").agg(
        pl.len().alias("calls"), pl.col("dur").sum().alias("us"), pl.col("step_us").first()
    )
    steps_of_rank = spans.group_by("rank").agg(
        pl.col("step").n_unique().alias("steps"), pl.col("step_us").unique().sum().alias("profiled_us")
    )
    # A rank without a phase in a step spent no time in it: fill the grid before taking medians.
    grid = (
        per_step.select("rank", "file", "phase", "kind")
        .unique()
        .join(spans.select("rank", "step", "step_us").unique(["rank", "step"]), on="rank")
        .join(per_step.select("rank", "phase", "step", "calls", "us"), on=["rank", "phase", "step"], how="left")
        .with_columns(pl.col("calls", "us").fill_null(0))
    )
    compared = grid.with_columns(
        ranks=pl.col("rank").n_unique().over("phase", "step"),
        value_median=pl.col("us").median().over("phase", "step"),
        step_median=pl.col("step_us").median().over("phase", "step"),
    ).with_columns(excess=(pl.col("us") - pl.col("value_median")) / pl.col("step_median"))
    table = (
        compared.group_by("rank", "file", "phase", "kind")
        .agg(
            pl.col("calls").sum().cast(pl.Int64),
            (pl.col("us").sum() / 1000).alias("total_ms"),
            (pl.col("value_median").median() / 1000).alias("peer_median_ms"),
            pl.when(pl.col("ranks").max() >= 2).then(pl.col("excess").median()).alias("excess_share"),
            pl.when(pl.col("ranks").max() >= 2).then((pl.col("excess") > SLOW_STEP_RATIO - 1).mean()).alias("slow_share"),
        )
        .join(steps_of_rank, on="rank")
        .with_columns((pl.col("total_ms") / pl.col("steps")).alias("per_step_ms"))
    )
    return (
        table.select(list(PHASES))
        .with_columns(pl.col("per_step_ms", "peer_median_ms", "excess_share", "slow_share").round(3))
        .sort("rank", "phase")
    )


def slow_phase_findings(phases: pl.DataFrame) -> pl.DataFrame:
    """One STRAGGLER finding per rank that is slow in an annotated phase: the phase where it adds the most
    (of phases within SAME_EXCESS of that, the shortest: nested phases share their excess)."""
    slow = phases.filter(
        (pl.col("kind") == "annotation") & (pl.col("excess_share") >= MIN_RATIO - 1) & (pl.col("slow_share") >= MIN_SLOW_SHARE)
    )
    if slow.is_empty():
        return empty(FINDINGS)
    # Nested phases share one excess (`data` around `enumerate(DataLoader)#…`): name the innermost, the most specific.
    near_max = pl.col("excess_share") >= SAME_EXCESS * pl.col("excess_share").max().over("rank")
    worst = slow.filter(near_max).sort("per_step_ms", "phase").unique("rank", keep="first", maintain_order=True).sort("rank")
    collectives = phases.filter(pl.col("kind") == "collective").select(
        "rank", pl.col("per_step_ms").alias("coll_ms"), pl.col("peer_median_ms").alias("coll_peer_ms")
    )
    worst = worst.join(collectives, on="rank", how="left")
    mirror = pl.when(pl.col("coll_ms") < pl.col("coll_peer_ms")).then(
        pl.format(
            "; its collectives took {} ms per step against {} ms for the median rank: the others waited for it",
            pl.col("coll_ms").round(1),
            pl.col("coll_peer_ms").round(1),
        )
    )
    text = pl.format(
        "rank {} spends {} ms per profiled step in `{}` against {} ms for the median rank (+{}% of a step, on {}% of the steps){}",
        pl.col("rank"),
        pl.col("per_step_ms").round(1),
        pl.col("phase"),
        pl.col("peer_median_ms").round(1),
        (pl.col("excess_share") * 100).round(0).cast(pl.Int64),
        (pl.col("slow_share") * 100).round(0).cast(pl.Int64),
        mirror.fill_null(""),
    )
    findings = worst.with_columns(
        pattern=pl.lit("TRACE-PHASE"),
        title=pl.lit("Rank spends longer than its peers in one annotated phase (profiler trace)"),
        category=pl.lit("STRAGGLER"),
        severity=pl.lit("warning"),
        role=pl.lit("initiating"),
        line=pl.lit(None, pl.Int64),
        text=text,
        captures=pl.struct("phase", "per_step_ms", "peer_median_ms", "excess_share", "slow_share", "steps").struct.json_encode(),
    )
    return conform(findings, FINDINGS)


def leading_phases(phases: pl.DataFrame, limit: int) -> list[str]:
    """The phases worth showing, at most `limit`: collectives, then those where some rank exceeds the median rank most, then the busiest."""
    ranked = (
        phases.group_by("phase")
        .agg(pl.col("peer_median_ms").max(), pl.col("excess_share").max())
        .sort("excess_share", "peer_median_ms", "phase", descending=[True, True, False], nulls_last=True)
    )
    slow = ranked.filter(pl.col("excess_share") > SLOW_STEP_RATIO - 1)["phase"].to_list()
    busy = ranked.sort("peer_median_ms", "phase", descending=[True, False])["phase"].to_list()
    names = [COLLECTIVES] if COLLECTIVES in busy else []
    for name in slow + busy:
        if name not in names and len(names) < limit:
            names.append(name)
    return names
