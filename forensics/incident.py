"""The bundle that carries one incident through discover -> ingest -> passes -> verdict.

Ingest modules and passes never talk to each other directly: they read frames from an
`Incident` and hand back `SourceResult`/`PassResult` objects that `analyze` merges in.
Named extra frames (NCCL topology, collectives, GPU samples, trace breakdowns, ...)
live in `tables` under stable names so the report and notebooks can find them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from forensics.schema import FINDINGS, INPUTS, LINES, METRICS, RANKS, empty


@dataclass(frozen=True)
class FileStatus:
    """How ingest fared with one input file (path relative to the incident root)."""

    path: str
    status: str  # InputStatus value
    problem: str | None = None
    lines: int | None = None
    cut_mid_line: bool | None = None  # text only: the last line has no newline
    lines_kept: int | None = None  # text only: lines kept for analysis (fewer when condensed)


@dataclass
class SourceResult:
    """What one ingest module produced: named frames and a status per file it read."""

    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    statuses: list[FileStatus] = field(default_factory=list)


@dataclass
class PassResult:
    """What one analysis pass produced: findings (FINDINGS schema) and named frames."""

    findings: pl.DataFrame = field(default_factory=lambda: empty(FINDINGS))
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)


@dataclass
class Incident:
    root: Path
    name: str = ""  # what the postmortem is titled: the folder's name, or a single log's stem
    inputs: pl.DataFrame = field(default_factory=lambda: empty(INPUTS))
    lines: pl.DataFrame = field(default_factory=lambda: empty(LINES))
    findings: pl.DataFrame = field(default_factory=lambda: empty(FINDINGS))
    metrics: pl.DataFrame = field(default_factory=lambda: empty(METRICS))
    ranks: pl.DataFrame = field(default_factory=lambda: empty(RANKS))
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    step_errors: list[str] = field(default_factory=list)  # steps that failed on this input
    timings: list[tuple[str, float]] = field(default_factory=list)  # (stage, wall seconds), in run order

    def paths_of_kind(self, *kinds: str) -> list[str]:
        return self.inputs.filter(pl.col("kind").is_in(list(kinds)))["path"].to_list()

    def add_findings(self, findings: pl.DataFrame) -> None:
        if not findings.is_empty():
            self.findings = pl.concat([self.findings, findings.select(list(FINDINGS))])

    def apply_statuses(self, statuses: list[FileStatus]) -> None:
        """Record how ingest fared with each file; unknown paths are ignored."""
        if not statuses:
            return
        update = pl.DataFrame(
            {
                "path": [s.path for s in statuses],
                "status": [s.status for s in statuses],
                "problem": [s.problem for s in statuses],
                "lines": [s.lines for s in statuses],
                "cut_mid_line": [s.cut_mid_line for s in statuses],
                "lines_kept": [s.lines_kept for s in statuses],
            },
            schema={
                "path": pl.String,
                "status": pl.String,
                "problem": pl.String,
                "lines": pl.Int64,
                "cut_mid_line": pl.Boolean,
                "lines_kept": pl.Int64,
            },
        ).unique("path", keep="last")
        self.inputs = self.inputs.update(update, on="path", how="left", include_nulls=False)

    def merge_source(self, result: SourceResult) -> None:
        self.tables.update(result.tables)
        self.apply_statuses(result.statuses)

    def merge_pass(self, result: PassResult) -> None:
        self.add_findings(result.findings)
        self.tables.update(result.tables)
