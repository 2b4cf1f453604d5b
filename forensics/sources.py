"""Registry of the ingest steps and passes beyond text logs and the pattern catalog.

Each entry takes the Incident and a progress callback and merges its frames and
findings in. A failure inside one entry marks its files instead of ending the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from forensics.incident import Incident
from forensics.passes.correlation import correlate, explain_periodicity
from forensics.passes.periodicity import find_periodicity
from forensics.passes.stragglers import find_stragglers
from forensics.report.timing_section import render_timing

Step = Callable[[Incident, Callable[[str], None]], None]


def timing_pass(incident: Incident, progress: Callable[[str], None]) -> None:
    """Recurring step-time spikes and the events that precede spikes or failures."""
    correlations = correlate(incident.findings, incident.metrics)
    incident.tables["periodicity"] = explain_periodicity(find_periodicity(incident.metrics), correlations)
    incident.tables["correlations"] = correlations


def straggler_pass(incident: Incident, progress: Callable[[str], None]) -> None:
    """Ranks slower than their peers in their own logged step times."""
    table, findings = find_stragglers(incident.metrics)
    incident.tables["stragglers"] = table
    incident.add_findings(findings)


SOURCES: list[Step] = []
PASSES: list[Step] = [timing_pass, straggler_pass]

# Markdown sections rendered from an incident's tables (collectives, GPU health, traces).
SECTIONS: list[Callable[[Incident], str | None]] = [render_timing]

# Figure writers: (incident, figures directory) -> paths of the PNGs written.
FIGURES: list[Callable[[Incident, Path], list[Path]]] = []
