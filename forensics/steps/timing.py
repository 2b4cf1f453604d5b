"""Timing steps over the METRICS frame: periodicity, correlations, log-based stragglers."""

from __future__ import annotations

from forensics.incident import Incident
from forensics.passes.correlation import correlate, explain_periodicity
from forensics.passes.periodicity import find_periodicity, step_times
from forensics.passes.stragglers import find_stragglers
from forensics.steps.common import Progress


def timing_pass(incident: Incident, progress: Progress) -> None:
    """Recurring step-time spikes and the events that precede spikes or failures."""
    times = step_times(incident.metrics)
    incident.tables["step_times"] = times
    correlations = correlate(incident.findings, incident.metrics, times=times)
    incident.tables["periodicity"] = explain_periodicity(find_periodicity(incident.metrics, times), correlations)
    incident.tables["correlations"] = correlations


def straggler_pass(incident: Incident, progress: Progress) -> None:
    """Ranks slower than their peers in their own logged step or data-loading times."""
    table, findings = find_stragglers(incident.metrics, incident.tables.get("step_times"))
    incident.tables["stragglers"] = table
    incident.add_findings(findings)
