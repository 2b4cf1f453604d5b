"""Markdown for the periodicity and event->effect correlation tables."""

from __future__ import annotations

from forensics.incident import Incident
from forensics.report.markup import cell, table


def render_timing(incident: Incident) -> str | None:
    periodicity = incident.tables.get("periodicity")
    correlations = incident.tables.get("correlations")
    out = []
    if periodicity is not None and not periodicity.is_empty():
        rows = [
            (
                cell(r["signal"]),
                cell(r["rank"]),
                str(r["period_steps"]),
                f"{r['period_seconds']:.1f}",
                f"{r['strength']:.2f}",
                cell(r["explained_by"]),
            )
            for r in periodicity.iter_rows(named=True)
        ]
        out += ["## Periodicity", "", table(["signal", "rank", "every N steps", "≈ seconds", "strength", "explained by"], rows), ""]
    if correlations is not None and not correlations.is_empty():
        rows = [
            (cell(r["event"]), cell(r["effect"]), f"{r['count']} of {r['of']}", f"{r['lift']:.1f}", str(r["window_seconds"]))
            for r in correlations.head(10).iter_rows(named=True)
        ]
        out += ["## Events followed by effects", "", table(["event", "effect", "followed", "lift", "window (s)"], rows), ""]
    return "\n".join(out) if out else None
