"""Health and numerics steps: metrics that went bad, runs that stopped silently, proof of health."""

from __future__ import annotations

from forensics.incident import Incident
from forensics.passes.health import abrupt_stops, health_proofs, progress_lines
from forensics.passes.host_memory import host_memory_climb, large_allocation_then_stopped
from forensics.passes.numerics import numerical_findings, numerics_table
from forensics.passes.skipped_updates import persistent_skips
from forensics.steps.common import Progress


def numerics_pass(incident: Incident, progress: Progress) -> None:
    """NaN/Inf, loss-scale collapse, gradient explosion, loss spikes and divergence, read from the metrics frame."""
    table = numerics_table(incident.metrics)
    incident.tables["numerics"] = table
    incident.add_findings(numerical_findings(table, incident.metrics, incident.lines))


def host_memory_pass(incident: Incident, progress: Progress) -> None:
    """Host memory that a trainer's own lines show multiplying, or a huge allocation just before the
    process was stopped."""
    incident.add_findings(host_memory_climb(incident.lines))
    incident.add_findings(large_allocation_then_stopped(incident.lines))


def skipped_updates_pass(incident: Incident, progress: Progress) -> None:
    """Optimizer steps skipped on non-finite gradients that go on to the end of the log."""
    incident.add_findings(persistent_skips(incident.findings, incident.lines))


def health_pass(incident: Incident, progress: Progress) -> None:
    """Abrupt stops as findings; proofs of health as the `health` table the verdict needs."""
    progress = progress_lines(incident.lines, incident.metrics)  # read by both: computed once
    incident.add_findings(abrupt_stops(incident.inputs, incident.lines, incident.metrics, incident.findings, progress))
    incident.tables["health"] = health_proofs(incident.lines, incident.metrics, incident.findings, progress)
