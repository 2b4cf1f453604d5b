"""The "GPU health" section: GPU findings and which rank ran on which GPU."""

from __future__ import annotations

import polars as pl

from forensics.incident import Incident
from forensics.report.markup import cell, table, where

# How passes.gpu_health tied a rank to a GPU, said for a reader.
HOW_WE_KNOW = {
    "nccl_busid": "the rank's NCCL line names the GPU's bus id",
    "xid_pid": "the Xid names the rank's process id",
    "assumed_local_rank": "assumed: GPU index = local rank",
}


def render_gpu_section(incident: Incident) -> str | None:
    gpu_ranks = incident.tables.get("gpu_ranks")
    findings = incident.findings.filter(pl.col("pattern").str.starts_with("GPU-") | pl.col("pattern").is_in(["PCIE-AER", "KERN-HOST-OOM"]))
    if (gpu_ranks is None or gpu_ranks.is_empty()) and findings.is_empty():
        return None
    out = ["## GPU health", ""]
    if not findings.is_empty():
        rows = [
            (
                cell(r["host"]),
                cell(r["gpu"]),
                cell(r["pci_bus_id"]),
                cell(r["rank"]),
                cell(r["title"]),
                cell(r["severity"]),
                where(r["file"], r["line"]),
            )
            for r in findings.sort([pl.col("time").is_null(), "time"]).head(30).iter_rows(named=True)
        ]
        out += [table(["host", "GPU", "PCI", "rank", "finding", "severity", "where"], rows), ""]
    else:
        out += ["No GPU health finding in the dumps and kernel logs.", ""]
    if gpu_ranks is not None and not gpu_ranks.is_empty():
        rows = [
            (
                cell(r["host"]),
                cell(r["gpu"]),
                cell(r["pci_bus_id"]),
                cell(r["rank"]),
                cell(HOW_WE_KNOW.get(r["rank_mapping"], r["rank_mapping"])),
            )
            for r in gpu_ranks.head(64).iter_rows(named=True)
        ]
        out += ["Which rank ran on which GPU:", "", table(["host", "GPU", "PCI", "rank", "how we know"], rows), ""]
    return "\n".join(out)
