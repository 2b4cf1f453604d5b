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
from forensics.report.gpu_section import render_gpu_section
from forensics.report.timing_section import render_timing
from forensics.report.traces_section import render_traces_section
from forensics.schema import InputKind
from forensics.steps import collectives, exceptions, gpu, health, timing, traces
from forensics.steps.common import Step

GPU_KINDS = (
    InputKind.NVIDIA_SMI_QUERY, InputKind.NVIDIA_SMI_XML, InputKind.NVIDIA_SMI_CSV, InputKind.NVIDIA_SMI_DMON, InputKind.NVIDIA_SMI_TOPO,
    InputKind.KERNEL_LOG,
)  # fmt: skip


SOURCES: list[Step] = [
    Step("nccl-c10d", collectives.ingest_nccl_and_c10d),
    Step("flight-recorder", collectives.ingest_flight_recorder, (InputKind.FLIGHT_RECORDER,)),
    Step("gpu", gpu.ingest_gpu, GPU_KINDS),
    Step("traces", traces.ingest_traces, (InputKind.TRACE,)),
]

PASSES: list[Step] = [
    Step("attribution", collectives.attribution_pass),
    Step("traceback-context", exceptions.traceback_context_pass),
    Step("stack-dumps", exceptions.stack_dump_pass),
    Step("collective-mismatch", exceptions.collective_mismatch_pass),
    Step("fabric", collectives.fabric_pass),
    Step("nccl-ras", collectives.nccl_ras_pass),
    Step("nccl-ops", collectives.nccl_ops_pass),
    Step("hang", collectives.hang_pass),
    Step("stalled-rank", exceptions.stalled_rank_pass),
    Step("busy-rank", collectives.busy_rank_pass),
    Step("gpu-health", gpu.gpu_health_pass),
    Step("timing", timing.timing_pass),
    Step("stragglers", timing.straggler_pass),
    Step("numerics", health.numerics_pass),
    Step("host-memory", health.host_memory_pass),
    Step("skipped-updates", health.skipped_updates_pass),
    Step("health", health.health_pass),  # last: proofs of health weigh every finding before them
]

SECTIONS: list[Callable[[Incident], str | None]] = [
    collectives.render_collectives_section,
    collectives.render_cluster_section,
    render_gpu_section,
    render_traces_section,
    render_timing,
]

FIGURES: list[Callable[[Incident, Path], list[Path]]] = [
    timing.draw_rank_timeline,
    gpu.draw_gpu_figures,
    traces.draw_trace_figures,
    timing.draw_metric_figures,
]
