"""Per-rank summary: host, first/last time, last step, first error, how the rank ended.

Notes:
    A rank's status says what its lines show happened to it, first match wins:
    `killed` when a PROCESS_KILLED or HOST_OOM finding names it; `crashed` when it has an
    initiating error; `stalled` when hang localization names it (it never reached the
    collective the others waited in); `timed_out` when it shows the cascade (watchdog
    timeouts, aborts after them); `exited` when it only has a non-zero exit with no cause
    of its own; `silent` when it left no line at all, or stopped stepping while another
    rank logged at least SILENT_INTERVALS more of its own logging intervals (in a hang
    those are prime suspects); `finished` when a completion line names it or names no
    rank; `running` otherwise: still logging when the logs end, with nothing wrong in
    its own lines. No rank is ever called healthy: a rank torn down with the job is
    `running` up to its last line, and the report says so. Hosts come from the rank's
    own lines, else from `rank_hosts` (NCCL init lines, the torchrun failure table).
"""

from __future__ import annotations

import polars as pl

from forensics.schema import MAX_RANKS, RANKS, conform, empty

FAILURE_ROLES = ["initiating", "symptom"]
SILENT_INTERVALS = 2  # logging intervals another rank stepped on past this one
FAILURE_SEVERITIES = ["error", "critical"]

WORLD_SIZE_HINTS = [
    r"\bnranks (\d+)\b",  # NCCL init lines
    r"\bWORLD_SIZE[=: ]+(\d+)",
    r"\bworld_size[=: ]+(\d+)",
    r"\bworld size: (\d+)",
]


def world_size(lines: pl.DataFrame, findings: pl.DataFrame) -> int | None:
    """Largest world size any source states, or max rank + 1, or None (sizes of MAX_RANKS or more are ignored)."""
    sizes = []
    if not lines.is_empty():
        stated = pl.max_horizontal([pl.col("text").str.extract(p).cast(pl.Int64, strict=False) for p in WORLD_SIZE_HINTS])
        hints = lines.lazy().filter(pl.col("text").str.contains(r"(?i)nranks|world_size|world size"))
        sizes.append(hints.select(pl.when(stated < MAX_RANKS).then(stated).max()).collect().item())
        sizes.append(_below_max(lines["rank"]))
    if not findings.is_empty():
        sizes.append(_below_max(findings["rank"]))
    sizes = [int(s) for s in sizes if s is not None]
    return max(sizes) if sizes else None


def _below_max(ranks: pl.Series) -> int | None:
    """Largest rank + 1 among ranks below MAX_RANKS, or None."""
    top = ranks.filter(ranks < MAX_RANKS).max()
    return None if top is None else int(top) + 1


def rank_table(
    lines: pl.DataFrame,
    findings: pl.DataFrame,
    metrics: pl.DataFrame,
    world: int | None,
    rank_hosts: pl.DataFrame | None = None,
    health: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per rank below `world` or seen in `lines`/`findings`: RANKS columns.

    `health` is the proofs table of `passes.health` (completion rows finish ranks).
    """
    ranked = lines.filter(pl.col("rank").is_not_null())
    if ranked.is_empty() and not world:
        return empty(RANKS)
    base = ranked.group_by("rank").agg(
        host=pl.col("host").drop_nulls().mode().min(),  # ties: the smallest name, not whichever hashed first
        first_time=pl.col("time").min(),
        last_time=pl.col("time").max(),
        lines=pl.len().cast(pl.Int64),
    )
    steps = _stepping(metrics)
    failures = findings.filter(
        pl.col("rank").is_not_null() & pl.col("role").is_in(FAILURE_ROLES) & pl.col("severity").is_in(FAILURE_SEVERITIES)
    )
    # A rank's first error is its earliest initiating finding; symptoms (its exit) only when it has none.
    first_error = (
        failures.sort(["rank", pl.col("role") != "initiating", pl.col("time").is_null(), "time", "file", "line"])
        .group_by("rank", maintain_order=True)
        .first()
        .select(
            "rank",
            first_error_file="file",
            first_error_line="line",
            first_error_pattern="pattern",
            first_error_text="text",
        )
    )
    serious = pl.col("severity").is_in(FAILURE_SEVERITIES)
    # A slow rank, or a GPU throttled or with corrected errors (hardware below critical), ran on.
    runs_on = (pl.col("category") == "STRAGGLER") | ((pl.col("category") == "HARDWARE") & (pl.col("severity") != "critical"))
    per_rank_roles = (
        findings.filter(pl.col("rank").is_not_null())
        .group_by("rank")
        .agg(
            killed=(pl.col("category").is_in(["PROCESS_KILLED", "HOST_OOM"]) & pl.col("role").is_in(FAILURE_ROLES)).any(),
            failed=((pl.col("role") == "initiating") & serious & ~runs_on & ~pl.col("pattern").str.starts_with("HANG")).any(),
            stalled=((pl.col("role") == "initiating") & pl.col("pattern").str.starts_with("HANG")).any(),
            cascaded=(pl.col("role") == "cascade").any(),
            exited=((pl.col("role") == "symptom") & serious).any(),
        )
    )
    finished = _finished(health)
    all_ranks = pl.DataFrame({"rank": list(range(world or 0))}, schema={"rank": pl.Int32})
    table = (
        pl.concat([all_ranks, base.select("rank"), first_error.select("rank")], how="vertical")
        .unique()
        .join(base, on="rank", how="left")
        .join(steps, on="rank", how="left")
        .join(first_error, on="rank", how="left")
        .join(per_rank_roles, on="rank", how="left")
        .with_columns(stopped_early=pl.col("stopped_early").fill_null(False))
        .with_columns(
            status=pl.when(pl.col("killed"))
            .then(pl.lit("killed"))
            .when(pl.col("failed"))
            .then(pl.lit("crashed"))
            .when(pl.col("stalled"))
            .then(pl.lit("stalled"))
            .when(pl.col("cascaded"))
            .then(pl.lit("timed_out"))
            .when(pl.col("exited"))
            .then(pl.lit("exited"))
            .when(pl.col("lines").is_null() | pl.col("stopped_early"))
            .then(pl.lit("silent"))
            .when(pl.col("rank").is_in(finished.drop_nulls().implode()) | pl.lit(finished.is_null().any()))
            .then(pl.lit("finished"))
            .otherwise(pl.lit("running"))
        )
        .sort("rank")
    )
    if rank_hosts is not None and not rank_hosts.is_empty():
        table = (
            table.join(rank_hosts.rename({"host": "known_host"}), on="rank", how="left")
            .with_columns(host=pl.coalesce("host", "known_host"))
            .sort("rank")
        )  # a join does not keep row order
    return conform(table, RANKS)


def _stepping(metrics: pl.DataFrame) -> pl.DataFrame:
    """Per rank: last_step, and stopped_early when another rank stepped on past it.

    A rank stopped early when some rank's last step exceeds its own by at least
    SILENT_INTERVALS of its own logging intervals (the median gap between its logged
    steps): one interval is the ordinary skew of ranks cut off by the same kill.
    """
    per_rank = (
        metrics.filter(pl.col("rank").is_not_null() & pl.col("step").is_not_null())
        .select("rank", "step")
        .unique()
        .sort("rank", "step")
        .group_by("rank")
        .agg(last_step=pl.col("step").max(), interval=pl.col("step").diff().median())
    )
    furthest = per_rank["last_step"].max()
    return per_rank.with_columns(
        stopped_early=pl.col("interval").is_not_null()
        & (pl.lit(furthest) - pl.col("last_step") >= SILENT_INTERVALS * pl.col("interval").clip(lower_bound=1))
    ).select("rank", "last_step", "stopped_early")


def _finished(health: pl.DataFrame | None) -> pl.Series:
    """Ranks a completion line names (null: a completion line that names no rank)."""
    if health is None or health.is_empty():
        return pl.Series("rank", [], dtype=pl.Int32)
    return health.filter(pl.col("kind") == "completion")["rank"]
