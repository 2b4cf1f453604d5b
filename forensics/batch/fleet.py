"""The fleet view over many incidents: index.parquet and fleet.md.

What fails most (categories of failures; healthy runs are counted apart), the signatures
that recur, the UNKNOWN failures grouped by the template of their first failure line (what
the catalog should learn next), which hosts and GPUs keep failing against what chance
explains (`lemons`), when: failures per month and category (a table and `fleet_figures`), the intervals between failures
(MTBF, regular or bursty) and whether they cluster at some hours of the day
(`time_patterns`), and the verdicts least sure of themselves (the review queue).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from forensics.batch.fleet_figures import FIGURE, draw_failures_by_month, monthly_failures
from forensics.batch.lemons import MAX_CHANCE, gpu_blame, host_blame, serial_blame
from forensics.batch.run import INDEX_COLUMNS
from forensics.batch.time_patterns import MIN_DATED, WINDOW_HOURS, failure_intervals, failures, hour_of_day_cluster
from forensics.passes.templates import error_template
from forensics.report.markup import cell, code, table

HOSTS_SHOWN = 10  # and every lemon
TEMPLATES_SHOWN = 20
REVIEW_BELOW = 0.5  # verdicts less confident than this are listed for a human to review
REVIEW_SHOWN = 20

INDEX_SCHEMA = {
    "id": pl.String,
    "path": pl.String,
    "category": pl.String,
    "state": pl.String,
    "confidence": pl.Float64,
    "summary": pl.String,
    "culprit_ranks": pl.List(pl.Int64),
    "culprit_hosts": pl.List(pl.String),
    "culprit_gpus": pl.List(pl.String),
    "culprit_gpu_serials": pl.List(pl.String),
    "hosts": pl.List(pl.String),
    "signature": pl.String,
    "world_size": pl.Int64,
    "start": pl.String,
    "end": pl.String,
    "first_failure_file": pl.String,
    "first_failure_line": pl.Int64,
    "first_failure_text": pl.String,
    "cluster": pl.String,
    "user": pl.String,
    "model": pl.String,
    "error": pl.String,
}


def index_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    frame = pl.DataFrame([{c: r.get(c) for c in INDEX_COLUMNS} for r in rows], schema=INDEX_SCHEMA)
    return frame.with_columns(start=pl.col("start").str.to_datetime("%Y-%m-%dT%H:%M:%SZ", strict=False, time_zone="UTC")).sort("id")


def render_fleet(index: pl.DataFrame, drawn: bool = False) -> str:
    """fleet.md for the index; `drawn`: figures/failures_by_month.png was written next to it."""
    analyzed = index.filter(pl.col("error").is_null())
    out = [
        "# Fleet summary",
        "",
        f"{index.height} incidents, {analyzed.height} analyzed, {index.height - analyzed.height} failed to analyze.",
        "",
    ]
    failed_runs = failures(index)
    if not analyzed.is_empty():
        healthy = analyzed.height - failed_runs.height
        by_category = failed_runs.group_by("category").len().sort(["len", "category"], descending=[True, False])
        rows = [(code(c), str(n), f"{100 * n / failed_runs.height:.0f}%") for c, n in by_category.iter_rows()]
        out += ["## What fails most", "", f"{failed_runs.height} failures; {healthy} runs were healthy (NO_FAILURE).", ""]
        out += [table(["category", "failures", "share"], rows), ""] if rows else []
        out += _clusters(analyzed, failed_runs) + _signatures(failed_runs) + _unknown_templates(failed_runs) + _lemons(index)
        monthly = monthly_failures(index)
        if not monthly.is_empty():
            figure = [f"![Failures per month by category](figures/{FIGURE})", ""] if drawn else []
            rows = [(row[0], *(str(n) for n in row[1:])) for row in monthly.iter_rows()]
            out += ["## When", "", *figure, table(["month", *(code(c) for c in monthly.columns[1:])], rows), ""]
        out += _timing(index) + _review_queue(analyzed)
    failed = index.filter(pl.col("error").is_not_null())
    if not failed.is_empty():
        rows = [(code(i), cell(e, 200)) for i, e in failed.select("id", "error").iter_rows()]
        out += ["## Could not analyze", "", table(["incident", "error"], rows), ""]
    return "\n".join(out).rstrip() + "\n"


def _clusters(analyzed: pl.DataFrame, failed_runs: pl.DataFrame) -> list[str]:
    """Failures per cluster a manifest named, with each cluster's most frequent category."""
    named = analyzed.drop_nulls("cluster")
    if named.is_empty():
        return []
    failed = failed_runs.drop_nulls("cluster").group_by("cluster").agg(failures=pl.len(), top=pl.col("category").mode().sort().first())
    per = (
        named.group_by("cluster")
        .len()
        .join(failed, on="cluster", how="left")
        .sort(["failures", "cluster"], descending=[True, False], nulls_last=True)
    )
    rows = [
        (cell(c), str(n), str(f or 0), code(t) if t else "—") for c, n, f, t in per.select("cluster", "len", "failures", "top").iter_rows()
    ]
    return ["## By cluster", "", table(["cluster", "incidents", "failures", "most frequent"], rows), ""]


def _signatures(failed_runs: pl.DataFrame) -> list[str]:
    """The leading evidence's pattern of failures, most frequent first, with first and last seen."""
    recurring = (
        failed_runs.drop_nulls("signature")
        .group_by("signature")
        .agg(
            failures=pl.len(),
            category=pl.col("category").mode().first(),
            first=pl.col("start").min(),
            last=pl.col("start").max(),
            ids=pl.col("id").sort(),
        )
        .filter(pl.col("failures") >= 2)
        .sort(["failures", "signature"], descending=[True, False])
        .head(20)
    )
    if recurring.is_empty():
        return []
    rows = [
        (code(r["signature"]), code(r["category"]), str(r["failures"]), _day(r["first"]), _day(r["last"]), cell(", ".join(r["ids"][:3])))
        for r in recurring.iter_rows(named=True)
    ]
    return ["## Recurring signatures", "", table(["signature", "category", "failures", "first seen", "last seen", "e.g."], rows), ""]


def _unknown_templates(failed_runs: pl.DataFrame) -> list[str]:
    """UNKNOWN failures grouped by their first failure line's template, most frequent first."""
    unknown = failed_runs.filter(pl.col("category") == "UNKNOWN")
    silent = unknown.filter(pl.col("first_failure_text").is_null()).height
    unknown = unknown.filter(pl.col("first_failure_text").is_not_null())
    note = [f"{silent} more UNKNOWN verdicts cite no failure line: their logs show neither a failure nor health.", ""] if silent else []
    if unknown.is_empty():
        return ["## UNKNOWN failures by message", "", *note] if silent else []
    grouped = (
        unknown.with_columns(template=error_template(pl.col("first_failure_text")))
        .group_by("template")
        .agg(incidents=pl.len(), ids=pl.col("id").sort())
        .sort(["incidents", "template"], descending=[True, False])
    )
    rows = [(code(t[:160]), str(n), cell(", ".join(ids[:3]))) for t, n, ids in grouped.head(TEMPLATES_SHOWN).iter_rows()]
    rest = grouped.height - min(grouped.height, TEMPLATES_SHOWN)
    return [
        "## UNKNOWN failures by message",
        "",
        f"{unknown.height} failures match no known signature. Their first failure lines, numbers, ids, paths and quoted "
        "strings masked: the most frequent are what the catalog should learn next.",
        "",
        table(["first failure line (template)", "incidents", "e.g."], rows),
        "",
        *([f"{rest} more templates are in index.parquet (`first_failure_text`).", ""] if rest else []),
        *note,
    ]


def _review_queue(analyzed: pl.DataFrame) -> list[str]:
    """Verdicts below REVIEW_BELOW confidence, least sure first."""
    unsure = analyzed.filter(pl.col("confidence") < REVIEW_BELOW).sort(["confidence", "id"])
    if unsure.is_empty():
        return []
    rows = [
        (code(r["id"]), code(r["category"]), r["state"] or "", f"{r['confidence']:.2f}", cell(r["summary"], 160))
        for r in unsure.head(REVIEW_SHOWN).iter_rows(named=True)
    ]
    return [
        "## Review queue",
        "",
        f"{unsure.height} verdicts are less than {REVIEW_BELOW:.0%} sure of themselves; the least sure first.",
        "",
        table(["incident", "category", "state", "confidence", "summary"], rows),
        "",
    ]


def _day(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d") if moment is not None else "undated"


def _lemons(index: pl.DataFrame) -> list[str]:
    """Hosts blamed more than chance explains, and GPUs blamed more than once."""
    hosts, gpus = host_blame(index), gpu_blame(index)
    out: list[str] = []
    if not hosts.is_empty():
        shown = hosts.head(max(HOSTS_SHOWN, hosts["lemon"].sum()))
        rows = [
            (
                cell(r["host"]), str(r["blamed"]), str(r["seen"]), f"{r['expected']:.1f}", f"{r['chance']:.2g}",
                "**lemon**" if r["lemon"] else "within chance", cell(", ".join(r["ids"][:5])),
            )
            for r in shown.iter_rows(named=True)
        ]  # fmt: skip
        rest = hosts.height - shown.height
        out += [
            "## Hosts that keep failing",
            "",
            f"Blamed: failures naming the host as the culprit; seen: failures whose logs name it. A lemon is blamed "
            f"more often than the fleet's rate explains (chance after testing every host under {MAX_CHANCE}).",
            "",
            table(["host", "blamed", "seen", "expected", "chance", "reading", "incidents (first 5)"], rows),
            "",
        ]
        out += [f"{rest} more hosts blamed twice or more, within chance, are in index.parquet.", ""] if rest else []
    if not gpus.is_empty():
        rows = [(cell(g), str(n), cell(", ".join(i[:5]))) for g, n, i in gpus.iter_rows()]
        out += ["## GPUs that keep failing", "", table(["GPU (host:bus id)", "blamed", "incidents (first 5)"], rows), ""]
    serials = serial_blame(index)
    if not serials.is_empty():
        rows = [(cell(s), str(n), cell(", ".join(w)), cell(", ".join(i[:5]))) for s, n, w, i in serials.iter_rows()]
        out += [
            "## GPU boards that keep failing",
            "",
            "By board serial number, from the incidents' nvidia-smi dumps: a board moved to another host or slot keeps it.",
            "",
            table(["serial", "blamed", "seen at (host:bus id)", "incidents (first 5)"], rows),
            "",
        ]
    return out


def _reading(cv: float | None) -> str:
    if cv is None:
        return "—"
    return "regular (periodic?)" if cv < 0.5 else "bursty" if cv > 1.5 else "random"


def _timing(index: pl.DataFrame) -> list[str]:
    """Failure intervals per category and hour-of-day clustering, with how many failures had no date."""
    dated = failures(index).filter(pl.col("start").is_not_null()).height
    undated = failures(index).height - dated
    out = ["## Failure intervals and time of day", ""]
    if undated:
        out += [f"{undated} failures carry no start time (their logs hold no timestamp) and are left out here.", ""]
    intervals = failure_intervals(index)
    if not intervals.is_empty():
        rows = [
            (
                code(r["category"]),
                str(r["failures"]),
                f"{r['mtbf_h']:.1f}",
                f"{r['median_gap_h']:.1f}",
                cell(None if r["cv"] is None else round(r["cv"], 2)),
                _reading(r["cv"]),
            )
            for r in intervals.iter_rows(named=True)
        ]
        out += [table(["category", "failures", "MTBF (h)", "median interval (h)", "CV", "reading"], rows), ""]
    cluster = hour_of_day_cluster(index)
    if cluster:
        last = (cluster["first_hour"] + WINDOW_HOURS) % 24
        out += [
            f"Failures cluster between {cluster['first_hour']:02d}:00 and {last:02d}:00 UTC: {cluster['failures']} of "
            f"{cluster['dated']} dated failures against {100 * cluster['expected_share']:.0f}% expected by chance "
            f"(p = {cluster['chance']:.2g}). Look for what runs then: cron jobs, backups, maintenance, peak load.",
            "",
        ]
    elif dated >= MIN_DATED:
        out += [f"No hour of the day stands out among {dated} dated failures.", ""]
    return out if len(out) > 2 else []


def write_fleet(rows: list[dict[str, Any]], out: Path) -> pl.DataFrame:
    out.mkdir(parents=True, exist_ok=True)
    index = index_frame(rows)
    index.write_parquet(out / "index.parquet")
    drawn = draw_failures_by_month(monthly_failures(index), out / "figures") is not None
    (out / "fleet.md").write_text(render_fleet(index, drawn), encoding="utf-8")
    return index
