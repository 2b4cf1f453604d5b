"""verdict.json exactly as CONTRACT.md specifies (schema_version 1), plus extra fields."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import polars as pl

from forensics import __version__
from forensics.analysis import Analysis

SCHEMA_VERSION = 1


def _iso(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


MAX_SILENT_ROWS = 1024  # silent ranks listed one row each; `silent_ranks` holds them all as ranges


def _unheard(ranks: pl.DataFrame) -> pl.Expr:
    """Ranks the world size promises that no line, host or time shows: silent, and nothing else known."""
    return (pl.col("status") == "silent") & pl.col("host").is_null() & pl.col("first_time").is_null() & pl.col("first_error_file").is_null()


def _silent_ranges(ranks: pl.DataFrame) -> list[list[int]]:
    """[first, last] runs of consecutive unheard ranks: 131,071 of them fit in one pair."""
    unheard = ranks.filter(_unheard(ranks)).select("rank").sort("rank")
    runs = unheard.with_columns(run=(pl.col("rank").diff() != 1).fill_null(True).cum_sum())
    return [
        [first, last]
        for first, last in runs.group_by("run", maintain_order=True)
        .agg(first=pl.col("rank").min(), last=pl.col("rank").max())
        .drop("run")
        .iter_rows()
    ]


def _ranks(analysis: Analysis) -> list[dict[str, Any]]:
    ranks = analysis.incident.ranks
    listed = ranks.filter(~_unheard(ranks) | (pl.int_range(pl.len()).over(_unheard(ranks)) < MAX_SILENT_ROWS))
    rows = []
    for r in listed.iter_rows(named=True):
        rows.append(
            {
                "rank": r["rank"],
                "host": r["host"],
                "status": r["status"],
                "first_time": _iso(r["first_time"]),
                "last_time": _iso(r["last_time"]),
                "last_step": r["last_step"],
                "first_error_file": r["first_error_file"],
                "first_error_line": r["first_error_line"],
                "first_error_pattern": r["first_error_pattern"],
            }
        )
    return rows


def _inputs(analysis: Analysis) -> list[dict[str, Any]]:
    return [
        {
            "path": r["path"],
            "kind": r["kind"],
            "rank": r["rank"],
            "host": r["host"],
            "status": r["status"],
            "problem": r["problem"],
            "bytes": r["bytes"],
            "lines": r["lines"],
            "lines_kept": r["lines_kept"],
        }
        for r in analysis.incident.inputs.sort("path").iter_rows(named=True)
    ]


def _work_lost(lost: dict[str, Any] | None) -> dict[str, Any] | None:
    if lost is None:
        return None
    saves = {key: {**lost[key], "time": _iso(lost[key]["time"])} for key in ("checkpoint", "unfinished") if lost[key]}
    return {**lost, **saves}


def _table_records(analysis: Analysis, name: str) -> list[dict[str, Any]]:
    table = analysis.incident.tables.get(name)
    if table is None or table.is_empty():
        return []
    return json.loads(table.write_json())


def verdict_document(analysis: Analysis) -> dict[str, Any]:
    incident, verdict = analysis.incident, analysis.verdict
    lines = incident.lines
    hosts = sorted(set(lines["host"].drop_nulls().unique().to_list()) | set(incident.ranks["host"].drop_nulls().to_list()))
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "incident": {
            "path": incident.root.as_posix(),
            "world_size": analysis.world_size,
            "ranks_seen": sorted(int(r) for r in lines["rank"].drop_nulls().unique().to_list()),
            "hosts": hosts,
            "start": _iso(lines["time"].min()) if not lines.is_empty() else None,
            "end": _iso(lines["time"].max()) if not lines.is_empty() else None,
        },
        "verdict": {
            "category": str(verdict.category),
            "state": verdict.state,
            "summary": verdict.summary,
            "culprit_ranks": verdict.culprit_ranks,
            "culprit_hosts": verdict.culprit_hosts,
            "culprit_gpus": verdict.culprit_gpus,
            "first_failure": verdict.first_failure,
            "confidence": verdict.confidence,
            "health_proofs": verdict.proofs,
            "work_lost": _work_lost(verdict.work_lost),
        },
        "hypotheses": [
            {
                "category": h.category,
                "score": h.score,
                "summary": h.summary,
                "culprit_ranks": h.culprit_ranks,
                "culprit_hosts": h.culprit_hosts,
                "evidence": h.evidence,
                "fixes": h.fixes,
            }
            for h in verdict.hypotheses
        ],
        "ranks": _ranks(analysis),
        "silent_ranks": _silent_ranges(incident.ranks),
        "stragglers": _table_records(analysis, "stragglers") + _table_records(analysis, "trace_stragglers"),
        "periodicity": _table_records(analysis, "periodicity"),
        "numerics": _table_records(analysis, "numerics"),
        "trace_phases": _table_records(analysis, "trace_phases"),
        "correlations": _table_records(analysis, "correlations"),
        "unmatched_errors": json.loads(analysis.unmatched.write_json()),
        "analysis_errors": list(incident.step_errors),
        "inputs": _inputs(analysis),
    }


def render_json(analysis: Analysis) -> str:
    return json.dumps(verdict_document(analysis), indent=2, default=str) + "\n"
