"""Training steps skipped or discarded as non-finite, to the end of the log: the model stopped training.

Enters: FINDINGS (the catalog's events that say a step was skipped because its gradient norm
was NaN/Inf, or a batch's loss was thrown away as NaN or absurd: SKIP_EVENTS) and LINES. Leaves: METRIC013 findings (NUMERICAL, warning, symptom),
one per stream (file, rank) with at least MIN_SKIPS such events whose last one lies in the
stream's last TAIL_LINES lines. A few skips while an fp16 loss scaler settles are normal and
end long before the log does; skips that continue to its end mean every step overflows or is
NaN. Where the skip notes state the loss scale (Megatron's interval line), a scale that still
falls over the last MIN_SKIPS of them is the scaler's warm-up, not yet a failure. Cites the
last skip.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, citing, empty

SKIP_EVENTS = ["NUM027", "NUM029", "NUM033"]
MIN_SKIPS = 3
TAIL_LINES = 5
STREAM = ["file", "stream"]


def persistent_skips(findings: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """METRIC013 per stream whose skipped steps go on to its end (see module notes)."""
    skips = findings.filter(pl.col("pattern").is_in(SKIP_EVENTS))
    if skips.height < MIN_SKIPS or lines.is_empty():
        return empty(FINDINGS)
    ends = lines.group_by("file", stream=pl.col("rank").fill_null(-1)).agg(tail_start=pl.col("line").sort().tail(TAIL_LINES).first())
    persisting = (
        skips.with_columns(stream=pl.col("rank").fill_null(-1))
        .sort("file", "line")
        .group_by(STREAM, maintain_order=True)
        .agg(pl.len().alias("skips"), _still_settling(), pl.all().last())
        .join(ends, on=STREAM)
        .filter(pl.col("skips") >= MIN_SKIPS, pl.col("line") >= pl.col("tail_start"), ~pl.col("settling"))
    )
    return citing(
        persisting.drop("settling"),
        pattern="METRIC013",
        title=pl.format("{} training steps skipped or losses discarded as non-finite, the last at the end of the log", "skips"),
        category="NUMERICAL",
        severity="warning",
        role="symptom",
        captures=pl.struct("skips").struct.json_encode(),
    )


def _still_settling() -> pl.Expr:
    """Whether the loss scale the last MIN_SKIPS skips state went down (false when none states one)."""
    scales = pl.col("captures").str.json_path_match("$.scale").cast(pl.Float64, strict=False).tail(MIN_SKIPS).drop_nulls()
    return (scales.min() < scales.max()).fill_null(False).alias("settling")
