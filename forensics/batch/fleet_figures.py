"""The fleet's figure: failures per month, stacked by category.

Enters: the batch index (one row per incident; `start` a UTC datetime or null). Leaves:
OUT/figures/failures_by_month.png, or nothing when no failure is dated. Only failures count
(NO_FAILURE is not one); undated ones are left out here and counted in fleet.md.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.batch.time_patterns import failures
from forensics.report.plotting import pyplot, save

FIGURE = "failures_by_month.png"


def monthly_failures(index: pl.DataFrame) -> pl.DataFrame:
    """One row per month with dated failures, one column per category (most frequent first), counts."""
    dated = failures(index).filter(pl.col("start").is_not_null())
    if dated.is_empty():
        return pl.DataFrame({"month": []}, schema={"month": pl.String})
    order = dated.group_by("category").len().sort(["len", "category"], descending=[True, False])["category"].to_list()
    counts = (
        dated.group_by(month=pl.col("start").dt.strftime("%Y-%m"), category="category")
        .len()
        .pivot(on="category", index="month", values="len")
        .fill_null(0)
        .sort("month")
    )
    return counts.select("month", *order)


def draw_failures_by_month(monthly: pl.DataFrame, out_dir: Path) -> Path | None:
    """Stacked bars of `monthly_failures`; None when there is nothing to draw."""
    if monthly.is_empty():
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    months = monthly["month"].to_list()
    bottom = [0] * len(months)
    for category in monthly.columns[1:]:
        counts = monthly[category].to_list()
        ax.bar(months, counts, bottom=bottom, label=category)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_ylabel("failures")
    ax.set_title(f"Failures per month by category ({sum(bottom)} dated failures)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    return save(fig, out_dir, FIGURE)
