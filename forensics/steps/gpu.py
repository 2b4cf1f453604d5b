"""GPU health step: nvidia-smi dumps and kernel logs -> samples/events -> GPU findings."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.incident import FileStatus, Incident
from forensics.ingest.gpu import GPU_SAMPLES
from forensics.ingest.kernel_log import GPU_EVENTS, attach_boot_times, parse_kernel_log
from forensics.ingest.nccl import process_ranks
from forensics.ingest.smi_csv import parse_gpu_csv
from forensics.ingest.smi_dmon import parse_dmon, parse_pmon
from forensics.ingest.smi_query import parse_nvidia_smi_query, parse_nvidia_smi_xml
from forensics.ingest.smi_topo import parse_topo
from forensics.ingest.timestamps import infer_year
from forensics.passes.gpu_health import analyze_gpu_health
from forensics.report.gpu_figures import render_gpu_figures
from forensics.schema import InputKind, InputStatus, empty
from forensics.steps.common import Progress, read_text

PARSERS = {
    InputKind.NVIDIA_SMI_QUERY: ("gpu_samples", parse_nvidia_smi_query),
    InputKind.NVIDIA_SMI_XML: ("gpu_samples", parse_nvidia_smi_xml),
    InputKind.NVIDIA_SMI_CSV: ("gpu_samples", parse_gpu_csv),
    InputKind.NVIDIA_SMI_DMON: ("gpu_samples", parse_dmon),
    InputKind.NVIDIA_SMI_TOPO: ("gpu_topology", parse_topo),
}
PMON_HEADER = "# gpu         pid"


def ingest_gpu(incident: Incident, progress: Progress) -> None:
    """Parse every nvidia-smi dump and kernel log into gpu_samples / gpu_events / gpu_topology."""
    frames: dict[str, list[pl.DataFrame]] = {}
    statuses = []
    for path, kind in incident.inputs.filter(pl.col("kind").is_in([str(k) for k in PARSERS])).select("path", "kind").iter_rows():
        text, problem = read_text(incident.root, path)
        name, parser = PARSERS[InputKind(kind)]
        if kind == InputKind.NVIDIA_SMI_DMON and PMON_HEADER in text:
            name, parser = "gpu_processes", parse_pmon
        frame, parse_problem = parser(text, path)
        frames.setdefault(name, []).append(frame)
        problems = "; ".join(p for p in (problem, parse_problem) if p)
        status = InputStatus.PARTIAL if problems else InputStatus.PARSED
        statuses.append(FileStatus(path, status, problems or None, frame.height))
    year = infer_year(incident.lines["text"].head(100_000), fallback=2026) if not incident.lines.is_empty() else None
    for path in incident.paths_of_kind(InputKind.KERNEL_LOG):
        text, _ = read_text(incident.root, path)
        events, _problem = parse_kernel_log(text, path, default_year=year)
        frames.setdefault("gpu_events", []).append(events)
    incident.apply_statuses(statuses)
    for name, parts in frames.items():
        incident.tables[name] = pl.concat(parts, how="diagonal_relaxed")
    if "gpu_events" in incident.tables:
        incident.tables["gpu_events"] = attach_boot_times(incident.tables["gpu_events"])


def rank_pids(incident: Incident) -> pl.DataFrame | None:
    """(rank, pid, host) from NCCL init lines and torchrun exit records, when present."""
    parts = []
    topology = incident.tables.get("nccl_topology")
    if topology is not None and not topology.is_empty():
        parts.append(
            process_ranks(topology).select(pl.col("global_rank").cast(pl.Int32).alias("rank"), pl.col("pid").cast(pl.Int64), pl.col("host"))
        )
    exits = incident.tables.get("exits")
    if exits is not None and not exits.is_empty():
        parts.append(exits.select(pl.col("rank").cast(pl.Int32), pl.col("pid").cast(pl.Int64), pl.col("host")))
    if not parts:
        return None
    return pl.concat(parts).drop_nulls(["rank", "pid"]).unique(["rank", "pid"])


def gpu_health_pass(incident: Incident, progress: Progress) -> None:
    samples = incident.tables.get("gpu_samples")
    events = incident.tables.get("gpu_events")
    if samples is None and events is None:
        return
    progress("checking GPU health")
    result = analyze_gpu_health(
        samples if samples is not None else empty(GPU_SAMPLES),
        events if events is not None else empty(GPU_EVENTS),
        nccl_topology=incident.tables.get("nccl_topology"),
        rank_pids=rank_pids(incident),
        metrics=incident.metrics,
    )
    incident.merge_pass(result)


def draw_gpu_figures(incident: Incident, directory: Path) -> list[Path]:
    samples = incident.tables.get("gpu_samples")
    if samples is None or samples.is_empty():
        return []
    return render_gpu_figures(samples, incident.tables.get("gpu_events"), directory)
