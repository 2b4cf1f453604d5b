"""Every incident's evidence as one Parquet file under OUT/findings/: the fleet's findings dataset.

Enters: an incident id and its Analysis. Leaves: OUT/findings/<id>.parquet in the FLEET_FINDINGS
schema, with the frame's name and schema version in the file metadata. One file per incident,
so a re-run replaces exactly that incident's rows and an incident that no longer analyzes
loses its stale file; every reader globs the folder.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.analysis import Analysis
from forensics.output import write_frame
from forensics.passes.templates import error_template
from forensics.schema import FLEET_FINDINGS, conform

FOLDER = "findings"


def incident_findings(incident_id: str, analysis: Analysis) -> pl.DataFrame:
    """The incident's FINDINGS as FLEET_FINDINGS rows."""
    hypotheses = analysis.verdict.hypotheses
    cited = [(e.get("pattern"), e.get("file"), e.get("line")) for e in (hypotheses[0].evidence if hypotheses else [])]
    leading = pl.DataFrame(cited, schema={"pattern": pl.String, "file": pl.String, "line": pl.Int64}, orient="row").unique()
    findings = analysis.incident.findings
    return conform(
        findings.join(
            leading.with_columns(leading=pl.lit(True)), on=["pattern", "file", "line"], how="left", nulls_equal=True
        ).with_columns(
            incident=pl.lit(incident_id),
            verdict_category=pl.lit(analysis.verdict.category),
            leading=pl.col("leading").fill_null(False),
            template=error_template(pl.col("text")),
        ),
        FLEET_FINDINGS,
    )


def path_for(out: Path, incident_id: str) -> Path:
    return out / FOLDER / f"{incident_id}.parquet"


def write_incident_findings(out: Path, incident_id: str, analysis: Analysis) -> None:
    """OUT/findings/<id>.parquet, written to a temporary name and renamed: readers never see half a file."""
    path = path_for(out, incident_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    write_frame(incident_findings(incident_id, analysis), "fleet_findings", tmp)
    tmp.replace(path)


def drop_incident_findings(out: Path, incident_id: str) -> None:
    """Remove an incident's file: its analysis failed, so its old rows no longer stand."""
    path_for(out, incident_id).unlink(missing_ok=True)
