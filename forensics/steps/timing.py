"""Timing steps over the METRICS frame: periodicity, correlations, log-based stragglers, and their figures."""

from __future__ import annotations

from pathlib import Path

from forensics.incident import Incident
from forensics.passes.correlation import correlate, event_steps, explain_periodicity
from forensics.passes.periodicity import find_periodicity, spike_periodogram, step_times
from forensics.passes.slowdown import data_bound_steps, job_slowdown, slower_before_the_window
from forensics.passes.stragglers import find_stragglers
from forensics.report.metric_figures import periodicity_figure, step_time_heatmap, training_curves
from forensics.report.rank_timeline import rank_timeline
from forensics.steps.common import Progress


def timing_pass(incident: Incident, progress: Progress) -> None:
    """Recurring step-time spikes and the events that precede spikes or failures."""
    times = step_times(incident.metrics)
    incident.tables["step_times"] = times
    correlations = correlate(incident.findings, incident.metrics, times=times)
    periodicity = find_periodicity(incident.metrics, times)
    events = event_steps(incident.findings, incident.metrics)
    incident.tables["periodicity"] = explain_periodicity(periodicity, correlations, events)
    incident.tables["correlations"] = correlations


def straggler_pass(incident: Incident, progress: Progress) -> None:
    """Ranks slower than their peers in their own logged step or data-loading times, a job that slowed down as a whole, steps that mostly wait for data."""
    times = incident.tables.get("step_times")
    table, findings = find_stragglers(incident.metrics, times)
    incident.tables["stragglers"] = table
    incident.add_findings(findings)
    if times is not None:
        incident.add_findings(job_slowdown(times, incident.metrics, incident.lines))
    incident.add_findings(slower_before_the_window(incident.lines))
    incident.add_findings(data_bound_steps(incident.metrics, incident.lines))


def draw_metric_figures(incident: Incident, directory: Path) -> list[Path]:
    """training.png, step_times.png and periodicity.png, each only when there is something to draw."""
    times = incident.tables.get("step_times")
    drawn = [training_curves(incident.metrics, incident.tables.get("numerics"), directory)]
    drawn.append(step_time_heatmap(times, directory) if times is not None else None)
    found = incident.tables.get("periodicity")
    if times is not None and found is not None and not found.is_empty():
        drawn.append(periodicity_figure(times, found.row(0, named=True), spike_periodogram(times), directory))
    return [path for path in drawn if path is not None]


def draw_rank_timeline(incident: Incident, directory: Path) -> list[Path]:
    """ranks.png for a multi-rank incident whose ranks logged timestamps."""
    drawn = rank_timeline(incident.ranks, incident.lines, directory)
    return [drawn] if drawn is not None else []
