"""Name the physical GPU behind a finding: its board serial number, from the nvidia-smi dumps.

Enters: FINDINGS (some rows carry a host and a PCI bus id) and GPU_SAMPLES (whose `serial`
nvidia-smi -q, -q -x or a `--query-gpu=serial` CSV filled). Leaves: the findings with
`gpu_serial` set where exactly one serial answers to the row's bus id on a compatible host.
A GPU moved to another host or slot keeps its serial, so a fleet can follow it across
incidents where `host:bus id` loses it.

Assumed: a dump without a host name may be of any host, so a bus id every host uses
(00000000:18:00.0 on each node of a cluster) matches only when the dumps agree on one
serial for it. The GPU index is not used: `nvidia-smi -q -i 3` calls that GPU 0.
"""

from __future__ import annotations

import polars as pl


def with_gpu_serials(findings: pl.DataFrame, samples: pl.DataFrame | None) -> pl.DataFrame:
    """`findings` with `gpu_serial` filled from `samples` where the bus id names one serial."""
    if samples is None or "serial" not in samples.columns or findings.is_empty():
        return findings
    known = samples.filter(pl.col("serial").is_not_null() & pl.col("pci_bus_id").is_not_null())
    known = known.select("pci_bus_id", "serial", dump_host="host").unique()
    if known.is_empty():
        return findings
    rows = findings.with_row_index("_row")
    candidates = rows.filter(pl.col("pci_bus_id").is_not_null()).select("_row", "pci_bus_id", "host").join(known, on="pci_bus_id")
    same_host = pl.col("dump_host").is_null() | pl.col("host").is_null() | (pl.col("dump_host") == pl.col("host"))
    serials = (
        candidates.filter(same_host)
        .group_by("_row")
        .agg(pl.col("serial").unique())
        .filter(pl.col("serial").list.len() == 1)
        .select("_row", found=pl.col("serial").list.first())
    )
    return (
        rows.join(serials, on="_row", how="left", maintain_order="left")
        .with_columns(gpu_serial=pl.coalesce("found", "gpu_serial"))
        .drop("_row", "found")
    )
