"""Hosts and GPUs blamed more often than chance: the lemons of a fleet.

Input is the batch index: per incident `hosts` (every host its logs name), `culprit_hosts`
`culprit_gpus` (`host:bus id`) and `culprit_gpu_serials`. Only failures count (NO_FAILURE is
not one).

Notes:
    A host that runs many jobs is blamed in some of them by chance. Per host, `seen` is the
    failures whose logs name it and `blamed` the failures that name it the culprit; the
    fleet's rate is sum(blamed) / sum(seen) over all hosts, and `expected` = seen x rate.
    The host is a lemon when it was blamed at least MIN_BLAMED times and the binomial tail
    P(X >= blamed | seen, rate), times the hosts tested (Bonferroni), stays under
    MAX_CHANCE. A GPU has no `seen` of its own (logs rarely list every GPU of a job), so
    GPUs blamed at least MIN_BLAMED times are listed with their host's figures.
"""

from __future__ import annotations

import polars as pl

from forensics.batch.time_patterns import failures
from forensics.passes.periodicity import binomial_tail

MIN_BLAMED = 2
MAX_CHANCE = 0.01


def host_blame(index: pl.DataFrame) -> pl.DataFrame:
    """Per host blamed at least MIN_BLAMED times: seen, blamed, expected, chance, lemon, ids;
    most suspicious first."""
    failed = failures(index)
    seen = failed.select("id", host=pl.col("hosts")).explode("host").drop_nulls("host").unique()
    blamed = failed.select("id", host=pl.col("culprit_hosts")).explode("host").drop_nulls("host").unique()
    # A culprit host the logs never listed still counts as seen where it was blamed.
    seen = pl.concat([seen, blamed]).unique()
    per_host = (
        seen.group_by("host")
        .agg(seen=pl.len())
        .join(blamed.group_by("host").agg(blamed=pl.len(), ids=pl.col("id").sort()), on="host", how="left")
        .with_columns(pl.col("blamed").fill_null(0))
    )
    if per_host.is_empty() or per_host["blamed"].sum() == 0:
        return per_host.clear().with_columns(expected=pl.lit(0.0), chance=pl.lit(1.0), lemon=pl.lit(False))
    rate = per_host["blamed"].sum() / per_host["seen"].sum()
    tested = per_host.height
    chance = [min(1.0, binomial_tail(k, n, rate) * tested) for k, n in per_host.select("blamed", "seen").iter_rows()]
    return (
        per_host.with_columns(expected=pl.col("seen") * rate, chance=pl.Series(chance, dtype=pl.Float64))
        .with_columns(lemon=pl.col("chance") < MAX_CHANCE)
        .filter(pl.col("blamed") >= MIN_BLAMED)
        .sort(["chance", "blamed", "host"], descending=[False, True, False])
    )


def gpu_blame(index: pl.DataFrame) -> pl.DataFrame:
    """GPUs (`host:bus id`) blamed in at least MIN_BLAMED failures: gpu, blamed, ids."""
    return (
        failures(index)
        .select("id", gpu=pl.col("culprit_gpus"))
        .explode("gpu")
        .drop_nulls("gpu")
        .unique()
        .group_by("gpu")
        .agg(blamed=pl.len(), ids=pl.col("id").sort())
        .filter(pl.col("blamed") >= MIN_BLAMED)
        .sort(["blamed", "gpu"], descending=[True, False])
    )


def serial_blame(index: pl.DataFrame) -> pl.DataFrame:
    """GPU boards (serial numbers) blamed in at least MIN_BLAMED failures: serial, blamed, the
    `host:bus id` places they were blamed at, ids. Incidents whose dumps name no serial are not here."""
    if "culprit_gpu_serials" not in index.columns:
        return pl.DataFrame(schema={"serial": pl.String, "blamed": pl.UInt32, "places": pl.List(pl.String), "ids": pl.List(pl.String)})
    failed = failures(index).filter(pl.col("culprit_gpus").list.len() == pl.col("culprit_gpu_serials").list.len())
    blamed = failed.select("id", place="culprit_gpus", serial="culprit_gpu_serials").explode(["place", "serial"]).drop_nulls("serial")
    return (
        blamed.group_by("serial")
        .agg(
            blamed=pl.col("id").n_unique(),
            places=pl.col("place").unique().sort(),
            ids=pl.col("id").unique().sort(),
        )
        .filter(pl.col("blamed") >= MIN_BLAMED)
        .sort(["blamed", "serial"], descending=[True, False])
    )
