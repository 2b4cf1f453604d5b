"""Match collectives across ranks' traces and find the ranks everyone waits for.

HTA's straggler analysis looks only at `ncclKernel*` names and cannot tell two ranks
apart; here every collective is matched across ranks and timed.

Notes:
    * A collective is an NCCL kernel on a GPU stream; in a trace with none (CPU-only
      runs on gloo) it is gloo's `gloo:<op>` span, which gloo records on its own worker
      thread around the whole algorithm, waiting for peers included. (The
      `c10d::<op>` CPU op and NCCL's `nccl:<op>` annotation only enqueue the work.)
    * Matching: the k-th collective of a rank on one process group is matched
      with the k-th of every other rank on that group. The group is the kernel's
      `Process Group Name` when the trace carries NCCL metadata (and `Seq`, when
      present, replaces the count k); otherwise it is the CUDA stream, which PyTorch
      creates per communicator in the same order on every rank, or `gloo` for gloo
      spans (one group: a job with several gloo groups is matched as if it had one).
    * A collective spins until its last peer arrives, so the rank whose collective
      is shortest arrived last: it is the late rank, and every other rank waited
      `dur - min(dur)` for it. Durations need no clock agreement between hosts; start
      skew (max - min start) is reported too, on the ranks' shared clock
      (`baseTimeNanoseconds` applied when present).
    * Ranks are ranked by the waiting they caused. `slowdown` compares how long a rank
      worked between its collectives with the median rank (1.0 = typical; 1.8 = it
      took 1.8x as long to reach its collectives).
    * A straggler is a rank that caused at least twice its fair share (1/world, capped
      at 75%) of all waiting and was late in at least a quarter of the collectives. It is reported as
      `initiating` when its slowdown is at least 1.5 and it was late in at least 3/4 of the
      collectives or caused most of all waiting (a rank slow once per step arrives late
      at that step's first collective only, and the others' later ones start together),
      else as a `symptom`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import polars as pl

from forensics.ingest.traces import TraceLoad
from forensics.passes.trace_breakdown import COMMUNICATION, KERNEL_TYPE
from forensics.schema import FINDINGS, Category, Role, Severity, conform, empty

_COLLECTIVE_OF_KERNEL = r"^nccl(?:Dev)?Kernel_([A-Za-z]+)"
_GLOO_SPAN = r"^gloo:(\w+)"
FAIR_SHARE_FACTOR = 2.0
MAX_SHARE_NEEDED = 0.75  # with 2 ranks, twice the fair share would be all of it
LATE_SHARE_MIN = 0.25
PERSISTENT_LATE_SHARE = 0.75
SEVERE_SLOWDOWN = 1.5
MOST_WAITING = 0.5


@dataclass
class Alignment:
    """Matched collectives, per-rank arrivals and the stragglers they reveal."""

    collectives: pl.DataFrame  # one row per matched collective
    arrivals: pl.DataFrame  # one row per (collective, rank)
    ranks: pl.DataFrame  # one row per rank: waiting caused, times late, slowdown
    stragglers: list[dict] = field(default_factory=list)
    findings: pl.DataFrame = field(default_factory=lambda: empty(FINDINGS))


def _collectives_of(events: pl.DataFrame) -> pl.DataFrame:
    """A trace's NCCL collective kernels, or its gloo spans when it has no such kernel."""
    kernels = (
        events.filter(pl.col("stream").is_not_null())
        .with_columns(KERNEL_TYPE)
        .filter(pl.col("kernel_type") == COMMUNICATION)
        .with_columns(pl.coalesce("collective_name", pl.col("name").str.extract(_COLLECTIVE_OF_KERNEL, 1)).alias("op"))
    )
    if not kernels.is_empty():
        return kernels
    return events.filter((pl.col("cat") == "user_annotation") & pl.col("name").str.contains(_GLOO_SPAN)).with_columns(
        pl.col("name").str.extract(_GLOO_SPAN, 1).alias("op")
    )


def collective_kernels(loads: list[TraceLoad]) -> pl.DataFrame:
    """Collectives of every ranked trace (NCCL kernels, else gloo spans), on a clock shared by all ranks, with match keys."""
    bases = [t.base_time_ns for t in loads if t.base_time_ns is not None]
    frames = []
    for t in loads:
        if t.rank is None or t.events.is_empty():
            continue
        shift = ((t.base_time_ns or 0) - min(bases)) // 1000 if bases and t.base_time_ns else 0
        frames.append(
            _collectives_of(t.events).select(
                pl.lit(t.rank, pl.Int32).alias("rank"),
                pl.lit(str(t.path)).alias("file"),
                (pl.col("ts") + shift).alias("ts"),
                "dur",
                "stream",
                "pg_name",
                "seq",
                "op",
            )
        )
    if not frames:
        return pl.DataFrame(
            schema={
                "rank": pl.Int32,
                "file": pl.String,
                "ts": pl.Int64,
                "dur": pl.Int64,
                "group": pl.String,
                "ordinal": pl.Int64,
                "op": pl.String,
            }
        )
    kernels = pl.concat(frames).sort("rank", "ts")
    group = pl.coalesce(pl.lit("pg ") + pl.col("pg_name"), pl.lit("stream ") + pl.col("stream").cast(pl.String), pl.lit("gloo"))
    kernels = kernels.with_columns(group.alias("group"))
    ordinal = pl.coalesce("seq", pl.int_range(pl.len()).over("rank", "group").cast(pl.Int64))
    return kernels.with_columns(ordinal.alias("ordinal")).select("rank", "file", "ts", "dur", "group", "ordinal", "op")


def _rank_table(arrivals: pl.DataFrame, collectives: pl.DataFrame) -> pl.DataFrame:
    total_wait = collectives["wait_caused_us"].sum()
    caused = collectives.group_by("late_rank").agg(pl.col("wait_caused_us").sum().alias("wait_caused_us"), pl.len().alias("times_late"))
    # Work between consecutive collectives of one group: what a slow rank takes longer at.
    work = (
        arrivals.sort("rank", "group", "ordinal")
        .with_columns((pl.col("ts") - (pl.col("ts") + pl.col("dur")).shift(1).over("rank", "group")).alias("work"))
        .group_by("rank")
        .agg(pl.col("work").clip(lower_bound=0).sum().alias("work_us"), pl.len().alias("collectives"))
    )
    median_work = work["work_us"].median() or 0
    return (
        work.join(caused, left_on="rank", right_on="late_rank", how="left")
        .with_columns(pl.col("wait_caused_us").fill_null(0), pl.col("times_late").fill_null(0).cast(pl.Int64))
        .with_columns(
            (pl.col("work_us") / median_work if median_work > 0 else pl.lit(None, pl.Float64)).alias("slowdown"),
            (pl.col("wait_caused_us") / total_wait if total_wait else pl.lit(0.0)).alias("wait_share"),
        )
        .sort("wait_caused_us", "rank", descending=[True, False])
    )


def align_collectives(loads: list[TraceLoad]) -> Alignment:
    """Match collectives across ranks; time each one; name the ranks that held others up."""
    kernels = collective_kernels(loads)
    per_collective = pl.col("group"), pl.col("ordinal")
    arrivals = (
        kernels.with_columns(pl.len().over(per_collective).alias("n_ranks"))
        .filter(pl.col("n_ranks") >= 2)
        .with_columns(
            (pl.col("ts") - pl.col("ts").min().over(per_collective)).alias("arrival_lag_us"),
            (pl.col("dur") - pl.col("dur").min().over(per_collective)).alias("waited_us"),
        )
    )
    collectives = (
        arrivals.group_by("group", "ordinal")
        .agg(
            pl.col("op").mode().first().alias("op"),
            (pl.col("op").n_unique() > 1).alias("op_mismatch"),
            pl.len().alias("n_ranks"),
            (pl.col("ts").max() - pl.col("ts").min()).alias("start_skew_us"),
            pl.col("rank").sort_by("dur", "ts", descending=[False, True]).first().alias("late_rank"),
            pl.col("rank").sort_by("ts").last().alias("last_started_rank"),
            pl.col("waited_us").sum().alias("wait_caused_us"),
            pl.col("ts").min().alias("first_start"),
        )
        .sort("first_start", "group")
        .with_row_index("collective")
    )
    arrivals = arrivals.join(collectives.select("group", "ordinal", "collective"), on=["group", "ordinal"])
    if collectives.is_empty():
        ranks = pl.DataFrame(
            schema={"rank": pl.Int32, "wait_caused_us": pl.Int64, "times_late": pl.Int64, "slowdown": pl.Float64, "wait_share": pl.Float64}
        )
        return Alignment(collectives, arrivals, ranks)
    ranks = _rank_table(arrivals, collectives)
    n_coll = collectives.height
    share_needed = min(FAIR_SHARE_FACTOR / max(ranks.height, 1), MAX_SHARE_NEEDED)
    suspects = ranks.filter((pl.col("wait_share") >= share_needed) & (pl.col("times_late") >= LATE_SHARE_MIN * n_coll))
    files = dict(kernels.select("rank", "file").sort("rank", "file").unique("rank", keep="first", maintain_order=True).iter_rows())
    stragglers, rows = [], []
    for r in suspects.iter_rows(named=True):
        late_share = r["times_late"] / n_coll
        slowdown = r["slowdown"]
        persistent = late_share >= PERSISTENT_LATE_SHARE or r["wait_share"] > MOST_WAITING
        severe = persistent and slowdown is not None and slowdown >= SEVERE_SLOWDOWN
        evidence = (
            f"rank {r['rank']} arrived last at {r['times_late']} of {n_coll} collectives; other ranks waited "
            f"{r['wait_caused_us'] / 1000:,.1f} ms for it ({100 * r['wait_share']:.0f}% of all collective waiting)"
        )
        stragglers.append({"rank": r["rank"], "slowdown": None if slowdown is None else round(slowdown, 2), "evidence": evidence})
        rows.append(
            {
                "pattern": "TRACE-STRAGGLER",
                "title": "Rank arrives late at collectives (profiler trace)",
                "category": Category.STRAGGLER,
                "severity": Severity.WARNING,
                "role": Role.INITIATING if severe else Role.SYMPTOM,
                "file": files.get(r["rank"]),
                "line": None,
                "rank": r["rank"],
                "text": evidence,
                "captures": json.dumps(
                    {
                        "times_late": r["times_late"],
                        "collectives": n_coll,
                        "wait_caused_us": r["wait_caused_us"],
                        "wait_share": round(r["wait_share"], 4),
                        "slowdown": stragglers[-1]["slowdown"],
                        "max_start_skew_us": collectives["start_skew_us"].max(),
                    }
                ),
            }
        )
    findings = conform(pl.DataFrame(rows), FINDINGS) if rows else empty(FINDINGS)
    return Alignment(collectives.drop("first_start"), arrivals, ranks, stragglers, findings)
