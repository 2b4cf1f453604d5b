"""The fleet view over many incidents: index.parquet and fleet.md.

What fails most (categories), which hosts keep failing (culprit hosts in two or more
incidents), and when (incidents per month and category).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from forensics.batch.run import INDEX_COLUMNS
from forensics.report.markup import cell, code, table

INDEX_SCHEMA = {
    "id": pl.String,
    "path": pl.String,
    "category": pl.String,
    "state": pl.String,
    "confidence": pl.Float64,
    "summary": pl.String,
    "culprit_ranks": pl.List(pl.Int64),
    "culprit_hosts": pl.List(pl.String),
    "world_size": pl.Int64,
    "start": pl.String,
    "end": pl.String,
    "first_failure_file": pl.String,
    "first_failure_line": pl.Int64,
    "error": pl.String,
}


def index_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    frame = pl.DataFrame([{c: r.get(c) for c in INDEX_COLUMNS} for r in rows], schema=INDEX_SCHEMA)
    return frame.with_columns(start=pl.col("start").str.to_datetime("%Y-%m-%dT%H:%M:%SZ", strict=False, time_zone="UTC")).sort("id")


def render_fleet(index: pl.DataFrame) -> str:
    analyzed = index.filter(pl.col("error").is_null())
    out = [
        "# Fleet summary",
        "",
        f"{index.height} incidents, {analyzed.height} analyzed, {index.height - analyzed.height} failed to analyze.",
        "",
    ]
    if not analyzed.is_empty():
        by_category = analyzed.group_by("category").len().sort(["len", "category"], descending=[True, False])
        rows = [(code(c), str(n), f"{100 * n / analyzed.height:.0f}%") for c, n in by_category.iter_rows()]
        out += ["## What fails most", "", table(["category", "incidents", "share"], rows), ""]
        hosts = (
            analyzed.select("id", "category", host=pl.col("culprit_hosts"))
            .explode("host")
            .drop_nulls("host")
            .group_by("host")
            .agg(incidents=pl.len(), categories=pl.col("category").unique().sort(), ids=pl.col("id").sort())
            .filter(pl.col("incidents") >= 2)
            .sort(["incidents", "host"], descending=[True, False])
        )
        if not hosts.is_empty():
            rows = [(cell(h), str(n), cell(", ".join(c)), cell(", ".join(i[:5]))) for h, n, c, i in hosts.iter_rows()]
            out += ["## Hosts that keep failing", "", table(["host", "incidents", "categories", "incidents (first 5)"], rows), ""]
        dated = analyzed.filter(pl.col("start").is_not_null())
        if not dated.is_empty():
            months = dated.group_by(pl.col("start").dt.strftime("%Y-%m").alias("month"), "category").len().sort(["month", "category"])
            rows = [(m, code(c), str(n)) for m, c, n in months.iter_rows()]
            out += ["## When", "", table(["month", "category", "incidents"], rows), ""]
    failed = index.filter(pl.col("error").is_not_null())
    if not failed.is_empty():
        rows = [(code(i), cell(e, 200)) for i, e in failed.select("id", "error").iter_rows()]
        out += ["## Could not analyze", "", table(["incident", "error"], rows), ""]
    return "\n".join(out).rstrip() + "\n"


def write_fleet(rows: list[dict[str, Any]], out: Path) -> pl.DataFrame:
    out.mkdir(parents=True, exist_ok=True)
    index = index_frame(rows)
    index.write_parquet(out / "index.parquet")
    (out / "fleet.md").write_text(render_fleet(index), encoding="utf-8")
    return index
