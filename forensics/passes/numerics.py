"""Numerical failure read from the training metrics themselves, whatever the log's wording.

Notes:
    - METRIC001 non-finite: the first metric row whose loss or gradient norm is NaN or
      Inf. A run that logs `loss nan` for hundreds of steps and completes is NUMERICAL,
      not healthy. The loss printed by one rank is usually all-reduced, so the finding
      names a rank only when several ranks log metrics and not all of them went bad.
    - METRIC002 loss-scale collapse: the fp16 dynamic loss scale fell below
      COLLAPSED_SCALE, or to 1/SCALE_DROP of the largest value logged: overflow after
      overflow, the scaler has nothing left to give.
    - METRIC003 gradient explosion: a finite gradient norm EXPLOSION times the median
      of the same stream's TRAIL norms before it (at least MIN_TRAIL of them): the
      update that follows throws the weights far off, the usual step before NaN.
    Each cites the first line that shows it; captures hold the step and counts.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

COLLAPSED_SCALE = 1.0
SCALE_DROP = 2.0**12
EXPLOSION = 100.0
TRAIL = 20
MIN_TRAIL = 5


def _first(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.sort([pl.col("time").is_null(), "time", "file", "line"]).head(1)


def _job_wide_finding(rows: pl.DataFrame, lines: pl.DataFrame, pattern: str, title: str, severity: str, captures: pl.Expr) -> pl.DataFrame:
    """The first of `rows` as an initiating NUMERICAL finding citing its line; no rank (a job-wide value)."""
    return (
        _first(rows)
        .join(lines.select("file", "line", "text", "host"), on=["file", "line"], how="left")
        .with_columns(
            pattern=pl.lit(pattern),
            title=pl.lit(title),
            category=pl.lit("NUMERICAL"),
            severity=pl.lit(severity),
            role=pl.lit("initiating"),
            rank=pl.lit(None),
            captures=captures.struct.json_encode(),
        )
    )


def non_finite(metrics: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    bad = metrics.filter(
        pl.col("loss").is_nan() | pl.col("loss").is_infinite() | pl.col("grad_norm").is_nan() | pl.col("grad_norm").is_infinite()
    )
    if bad.is_empty():
        return empty(FINDINGS)
    first = _first(bad)
    loggers = metrics.filter(pl.col("loss").is_not_null() | pl.col("grad_norm").is_not_null())["rank"].n_unique()
    blame_rank = loggers > 1 and bad["rank"].n_unique() < loggers
    field = "loss" if first["loss"].is_nan().fill_null(False).any() or first["loss"].is_infinite().fill_null(False).any() else "grad_norm"
    found = first.join(lines.select("file", "line", "text", "host"), on=["file", "line"], how="left").with_columns(
        pattern=pl.lit("METRIC001"),
        title=pl.lit(f"The logged {field.replace('_', ' ')} turned NaN/Inf"),
        category=pl.lit("NUMERICAL"),
        severity=pl.lit("critical"),
        role=pl.lit("initiating"),
        rank=pl.col("rank") if blame_rank else pl.lit(None),
        captures=pl.struct(
            field=pl.lit(field), step=pl.col("step"), non_finite_rows=pl.lit(bad.height), metric_rows=pl.lit(metrics.height)
        ).struct.json_encode(),
    )
    return conform(found, FINDINGS)


def loss_scale_collapse(metrics: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    scales = metrics.filter(pl.col("loss_scale").is_not_null() & pl.col("loss_scale").is_finite())
    if scales.is_empty():
        return empty(FINDINGS)
    top = scales["loss_scale"].max()
    collapsed = scales.filter((pl.col("loss_scale") < COLLAPSED_SCALE) | (pl.col("loss_scale") * SCALE_DROP <= top))
    if collapsed.is_empty():
        return empty(FINDINGS)
    captures = pl.struct(loss_scale=pl.col("loss_scale"), largest=pl.lit(top), collapsed_rows=pl.lit(collapsed.height))
    found = _job_wide_finding(
        collapsed, lines, "METRIC002", "The fp16 loss scale collapsed (overflow after overflow)", "critical", captures
    )
    return conform(found, FINDINGS)


def gradient_explosion(metrics: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    norms = metrics.filter(pl.col("grad_norm").is_not_null() & pl.col("grad_norm").is_finite()).sort("file", "line")
    if norms.height <= MIN_TRAIL:
        return empty(FINDINGS)
    stream = [pl.col("file"), pl.col("rank").fill_null(-1)]
    trailing = pl.col("grad_norm").shift(1).rolling_median(window_size=TRAIL, min_samples=MIN_TRAIL).over(stream)
    exploded = norms.with_columns(trailing=trailing).filter(pl.col("grad_norm") > EXPLOSION * pl.col("trailing"))
    if exploded.is_empty():
        return empty(FINDINGS)
    captures = pl.struct(step=pl.col("step"), grad_norm=pl.col("grad_norm"), trailing_median=pl.col("trailing"))
    title = f"The gradient norm exploded (over {EXPLOSION:.0f}x its recent median)"
    found = _job_wide_finding(exploded, lines, "METRIC003", title, "error", captures)
    return conform(found.drop("trailing"), FINDINGS)


def numerical_findings(metrics: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """METRIC001-003 findings (FINDINGS schema), empty when the metrics are sane."""
    if metrics.is_empty():
        return empty(FINDINGS)
    return pl.concat([non_finite(metrics, lines), loss_scale_collapse(metrics, lines), gradient_explosion(metrics, lines)])
