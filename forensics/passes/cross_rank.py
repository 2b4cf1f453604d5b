"""Per-rank summary: host, first/last time, last step, first error, how the rank ended.

Notes:
    A rank's status is read off its findings: `killed` when a PROCESS_KILLED or
    HOST_OOM finding names it; `crashed` when it has an initiating error; `stalled` when
    hang localization names it (it never reached the collective the others waited in); `timed_out`
    when it shows the cascade (watchdog timeouts, aborts after them); `exited` when it
    only has a non-zero exit with no cause of its own; `healthy` otherwise. Ranks below
    the world size that left no line at all are `missing`: in a hang those are prime
    suspects. Hosts come from the rank's own lines, else from `rank_hosts` (NCCL init
    lines, the torchrun failure table).
"""

from __future__ import annotations

import polars as pl

from forensics.schema import RANKS, conform, empty

FAILURE_ROLES = ["initiating", "symptom"]
FAILURE_SEVERITIES = ["error", "critical"]

WORLD_SIZE_HINTS = [
    r"\bnranks (\d+)\b",  # NCCL init lines
    r"\bWORLD_SIZE[=: ]+(\d+)",
    r"\bworld_size[=: ]+(\d+)",
    r"\bworld size: (\d+)",
]


def world_size(lines: pl.DataFrame, findings: pl.DataFrame) -> int | None:
    """Largest world size any source states, or max rank + 1, or None."""
    sizes = []
    if not lines.is_empty():
        hints = lines.lazy().filter(pl.col("text").str.contains(r"(?i)nranks|world_size|world size")).select(
            pl.max_horizontal([pl.col("text").str.extract(p).cast(pl.Int64, strict=False) for p in WORLD_SIZE_HINTS])
            .max()
            .alias("n")
        )
        stated = hints.collect()["n"][0]
        if stated is not None:
            sizes.append(int(stated))
        max_rank = lines["rank"].max()
        if max_rank is not None:
            sizes.append(int(max_rank) + 1)
    if not findings.is_empty() and findings["rank"].max() is not None:
        sizes.append(int(findings["rank"].max()) + 1)
    return max(sizes) if sizes else None


def rank_table(
    lines: pl.DataFrame,
    findings: pl.DataFrame,
    metrics: pl.DataFrame,
    world: int | None,
    rank_hosts: pl.DataFrame | None = None,
) -> pl.DataFrame:
    ranked = lines.filter(pl.col("rank").is_not_null())
    if ranked.is_empty() and not world:
        return empty(RANKS)
    base = ranked.group_by("rank").agg(
        host=pl.col("host").drop_nulls().mode().min(),  # ties: the smallest name, not whichever hashed first
        first_time=pl.col("time").min(),
        last_time=pl.col("time").max(),
        lines=pl.len().cast(pl.Int64),
    )
    steps = metrics.filter(pl.col("rank").is_not_null()).group_by("rank").agg(last_step=pl.col("step").max())
    failures = findings.filter(
        pl.col("rank").is_not_null()
        & pl.col("role").is_in(FAILURE_ROLES)
        & pl.col("severity").is_in(FAILURE_SEVERITIES)
    )
    first_error = (
        failures.sort(["rank", pl.col("time").is_null(), "time", "file", "line"])
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
    per_rank_roles = findings.filter(pl.col("rank").is_not_null()).group_by("rank").agg(
        killed=(pl.col("category").is_in(["PROCESS_KILLED", "HOST_OOM"]) & pl.col("role").is_in(FAILURE_ROLES)).any(),
        failed=((pl.col("role") == "initiating") & serious & ~pl.col("pattern").str.starts_with("HANG")).any(),
        stalled=((pl.col("role") == "initiating") & pl.col("pattern").str.starts_with("HANG")).any(),
        cascaded=(pl.col("role") == "cascade").any(),
        exited=((pl.col("role") == "symptom") & serious).any(),
    )
    all_ranks = pl.DataFrame({"rank": list(range(world or 0))}, schema={"rank": pl.Int32})
    table = (
        pl.concat([all_ranks, base.select("rank"), first_error.select("rank")], how="vertical")
        .unique()
        .join(base, on="rank", how="left")
        .join(steps, on="rank", how="left")
        .join(first_error, on="rank", how="left")
        .join(per_rank_roles, on="rank", how="left")
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
            .when(pl.col("lines").is_null())
            .then(pl.lit("missing"))
            .otherwise(pl.lit("healthy"))
        )
        .sort("rank")
    )
    if rank_hosts is not None and not rank_hosts.is_empty():
        table = table.join(rank_hosts.rename({"host": "known_host"}), on="rank", how="left").with_columns(
            host=pl.coalesce("host", "known_host")
        ).sort("rank")  # a join does not keep row order
    return conform(table, RANKS)
