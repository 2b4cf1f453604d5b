"""Markdown for the training dynamics: numerical anomalies, stragglers, periodicity, event->effect correlations."""

from __future__ import annotations

import polars as pl

from forensics.incident import Incident
from forensics.report.markup import cell, table, where

KIND_NAMES = {
    "non_finite": "NaN/Inf",
    "loss_scale_collapse": "loss-scale collapse",
    "grad_explosion": "gradient explosion",
    "loss_spike": "loss spike",
    "divergence": "divergence",
    "plateau": "plateau",
    "replica_divergence": "rank departs from its peers",
}


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _numerics(anomalies: pl.DataFrame) -> list[str]:
    """One row per anomaly kind: where it first happened and how often."""
    firsts = anomalies.sort("file", "line").group_by("kind", maintain_order=True).agg(pl.all().first(), count=pl.len())
    rows = [
        (
            cell(KIND_NAMES.get(r["kind"], r["kind"])),
            cell(r["step"]),
            cell(r["rank"]),
            _number(r["value"]),
            _number(r["reference"]),
            str(r["count"]),
            where(r["file"], r["line"]),
        )
        for r in firsts.iter_rows(named=True)
    ]
    headers = ["anomaly", "first step", "rank", "value", "against", "times", "first seen"]
    note = "`against` is the baseline it was judged by: the recent median, the best loss so far, or the largest loss scale."
    return ["## Training numerics", "", table(headers, rows), "", note, ""]


def _stragglers(stragglers: pl.DataFrame) -> list[str]:
    rows = [
        (
            cell(r["rank"]),
            f"{r['slowdown']:.2f}x",
            f"{r['onset_step']}-{r['end_step']}",
            f"{r['cost_s']:.1f} s ({100 * r['cost_share']:.0f} %)",
            cell(r["evidence"]),
        )
        for r in stragglers.iter_rows(named=True)
    ]
    return ["## Stragglers in the logged step times", "", table(["rank", "slowdown", "steps", "time lost", "evidence"], rows), ""]


def render_timing(incident: Incident) -> str | None:
    numerics = incident.tables.get("numerics")
    stragglers = incident.tables.get("stragglers")
    periodicity = incident.tables.get("periodicity")
    correlations = incident.tables.get("correlations")
    out = []
    if numerics is not None and not numerics.is_empty():
        out += _numerics(numerics)
    if stragglers is not None and not stragglers.is_empty():
        out += _stragglers(stragglers)
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
