"""Registry of the pipeline steps beyond text logs and the pattern catalog, in run order.

SOURCES read files or frames into tables; PASSES judge (run after the catalog has
matched); SECTIONS render markdown from tables; FIGURES draw PNGs. `analyze` runs each
step isolated: a step that fails marks the files it reads as partial instead of ending
the analysis.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from forensics.incident import Incident
from forensics.report.timing_section import render_timing
from forensics.schema import InputKind
from forensics.passes.collective_mismatch import odd_rank_out
from forensics.passes.traceback_context import classify_by_frames, demote_overridden
from forensics.steps import collectives, gpu, timing, traces
from forensics.steps.common import Step

GPU_KINDS = (
    InputKind.NVIDIA_SMI_QUERY, InputKind.NVIDIA_SMI_CSV, InputKind.NVIDIA_SMI_DMON, InputKind.NVIDIA_SMI_TOPO,
    InputKind.KERNEL_LOG,
)  # fmt: skip

def traceback_context_pass(incident: Incident, progress: Callable[[str], None]) -> None:
    """Unrecognized exceptions classified by the subsystem their traceback runs through."""
    context = classify_by_frames(incident.lines, incident.findings)
    incident.findings = demote_overridden(incident.findings, context, incident.lines)
    incident.add_findings(context)


def collective_mismatch_pass(incident: Incident, progress: Callable[[str], None]) -> None:
    """The rank its peers' DETAIL fingerprint checks name as running another collective."""
    incident.add_findings(odd_rank_out(incident.findings))


SOURCES: list[Step] = [
    Step("nccl-c10d", collectives.ingest_nccl_and_c10d),
    Step("flight-recorder", collectives.ingest_flight_recorder, (InputKind.FLIGHT_RECORDER,)),
    Step("gpu", gpu.ingest_gpu, GPU_KINDS),
    Step("traces", traces.ingest_traces, (InputKind.TRACE,)),
]

PASSES: list[Step] = [
    Step("attribution", collectives.attribution_pass),
    Step("traceback-context", traceback_context_pass),
    Step("collective-mismatch", collective_mismatch_pass),
    Step("hang", collectives.hang_pass),
    Step("gpu-health", gpu.gpu_health_pass),
    Step("timing", timing.timing_pass),
    Step("stragglers", timing.straggler_pass),
]

SECTIONS: list[Callable[[Incident], str | None]] = [
    collectives.render_collectives_section,
    gpu.render_gpu_section,
    traces.render_traces_section,
    render_timing,
]

FIGURES: list[Callable[[Incident, Path], list[Path]]] = [gpu.draw_gpu_figures, traces.draw_trace_figures]
