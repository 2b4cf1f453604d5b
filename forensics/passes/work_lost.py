"""The work a failure cost: the last checkpoint written before it, and the steps and time since.

Enters: the findings (checkpoint lines are catalog events of category CHECKPOINT_IO), the
METRICS frame, and the verdict's first failure (file, line, time or time_after, as ISO text).
Leaves: a dict for verdict.json and the postmortem, or None when there is no failure.
Assumed: "before the failure" is by time where both lines carry one (an untimed failure
takes the last time its stream logged before it, and the time lost is then a lower bound),
else by line in the failure's own file. A save counts as written when its line says so
(`saved`, `finished`, `is ready`) or when training stepped on after it in the same file; a
later save with neither is reported as unfinished, never as a checkpoint. The checkpoint's
step is the one its line names (`iteration 50`, `step_100`), else the last step its file
logged up to it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl

STEP_IN_CAPTURES = ("iteration", "step")
# `at iteration 600`, `step_10`, `global_step1500`, `@ 1200 updates`, HF's `checkpoint-500` (a step; fairseq's
# `checkpoint2.pt` is an epoch and is not read).
STEP_IN_TEXT = r"(?i)(?:\b(?:iteration|iter|step|global_step)[\s_=:-]*0*(\d+)|\b(\d+) updates\b|\bcheckpoint-0*(\d+))"
LAST_SECOND = datetime.max.replace(tzinfo=UTC) - timedelta(seconds=1)
WRITTEN = r"(?i)\b(?:saved|finished|wrote|written|ready|successfully|committed|completed?|done)\b"


def work_lost(findings: pl.DataFrame, metrics: pl.DataFrame, failure: dict[str, Any] | None) -> dict[str, Any] | None:
    """{checkpoint, unfinished: {file, line, text, time, step} | None, last_step, steps_lost, seconds_lost, at_least}."""
    if failure is None:
        return None
    exact, after = _utc(failure.get("time")), _utc(failure.get("time_after"))
    bound = {
        **failure,
        "time": exact or (after + timedelta(seconds=1) if after and after < LAST_SECOND else after),
    }  # ISO drops the fraction
    progress = _before(metrics.filter(pl.col("step").is_not_null()), bound)
    saves = _written(_before(findings.filter((pl.col("category") == "CHECKPOINT_IO") & (pl.col("role") == "event")), bound), progress)
    written = saves.filter(pl.col("written"))
    save = written.row(-1, named=True) if not written.is_empty() else None
    unfinished = saves.filter(~pl.col("written") & (pl.col("_order") > (save["_order"] if save else -1)))
    last_step = progress["step"].max()
    checkpoint = _cited(save, progress)
    step = checkpoint["step"] if checkpoint else None
    failed_at = exact or after
    seconds = max((failed_at - save["time"]).total_seconds(), 0.0) if save and failed_at and save["time"] else None
    return {
        "checkpoint": checkpoint,
        "unfinished": _cited(unfinished.row(-1, named=True), progress) if not unfinished.is_empty() else None,
        "last_step": last_step,
        "steps_lost": max(last_step - step, 0) if last_step is not None and step is not None else None,
        "seconds_lost": seconds,
        "at_least": seconds is not None and exact is None,
    }


def _before(rows: pl.DataFrame, failure: dict[str, Any]) -> pl.DataFrame:
    """Rows earlier than the failure, in order: by time where both have one, else by line in its file."""
    if failure["time"] is not None:
        timed = rows.filter(pl.col("time").is_not_null() & (pl.col("time") <= failure["time"]))
        if not timed.is_empty():
            return timed.sort("time", "file", "line")
    if failure.get("line") is None:
        return rows.clear()
    return rows.filter((pl.col("file") == failure["file"]) & (pl.col("line") < failure["line"])).sort("line")


def _written(saves: pl.DataFrame, progress: pl.DataFrame) -> pl.DataFrame:
    """`written`: the line says the save completed, or its file logged a training step after it."""
    last_step_line = progress.group_by("file").agg(_last_step=pl.col("line").max())
    return (
        saves.with_row_index("_order")
        .join(last_step_line, on="file", how="left")
        .with_columns(
            written=pl.col("text").str.contains(WRITTEN).fill_null(False) | (pl.col("_last_step") > pl.col("line")).fill_null(False)
        )
    )


def _cited(save: dict[str, Any] | None, progress: pl.DataFrame) -> dict[str, Any] | None:
    if save is None:
        return None
    return {"file": save["file"], "line": save["line"], "text": save["text"], "time": save["time"], "step": _step_of(save, progress)}


def _step_of(save: dict[str, Any], progress: pl.DataFrame) -> int | None:
    """The step the checkpoint line names, else the last step its file logged up to it."""
    captures = pl.Series([save.get("captures") or "{}"])
    for key in STEP_IN_CAPTURES:
        named = captures.str.json_path_match(f"$.{key}").cast(pl.Int64, strict=False)[0]
        if named is not None:
            return named
    groups = pl.Series([save["text"] or ""]).str.extract_groups(STEP_IN_TEXT).struct.unnest()
    in_text = [value for value in groups.row(0) if value is not None]
    if in_text:
        return int(in_text[0])
    logged = progress.filter((pl.col("file") == save["file"]) & (pl.col("line") <= save["line"]))
    return logged.sort("line")["step"][-1] if not logged.is_empty() else None


def _utc(iso: str | None) -> datetime | None:
    """verdict's `2026-01-01T12:30:59Z` -> an aware datetime; None for none or for text that is not one."""
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(UTC) if iso else None
    except (ValueError, OverflowError):
        return None
