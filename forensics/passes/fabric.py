"""The fabric's own state as findings: an InfiniBand port that is not Active on a host.

Enters: the `ib_ports` frame of ingest.fabric (ibstat output, with the host its file names).
Leaves: FINDINGS rows, FABRIC001 (NETWORK, initiating): one per port whose State is not
Active (Down, Polling, Init, Armed), citing its `State:` line and naming the host and CA.
A port that is down is a fault of that host's fabric whatever the ranks then report: the
NCCL transport errors on every rank are what it costs them, and the verdict names the host.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty


def fabric_findings(ib_ports: pl.DataFrame | None) -> pl.DataFrame:
    """FABRIC001 per InfiniBand port that is not Active."""
    if ib_ports is None or ib_ports.is_empty():
        return empty(FINDINGS)
    down = ib_ports.filter(pl.col("state").str.to_lowercase() != "active")
    found = down.select(
        "file", "line", "host", "text",
        pattern=pl.lit("FABRIC001"),
        title=pl.format("InfiniBand port {} port {} is {} (physical state {})", "ca", "port", "state", pl.col("physical_state").fill_null("unknown")),
        category=pl.lit("NETWORK"), severity=pl.lit("critical"), role=pl.lit("initiating"),
        captures=pl.struct("ca", "ca_type", "port", "state", "physical_state", "rate_gbps").struct.json_encode(),
    )  # fmt: skip
    return conform(found, FINDINGS)
