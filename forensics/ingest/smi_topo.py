"""`nvidia-smi topo -m` -> GPU_TOPOLOGY rows: how each pair of GPUs (and NICs) is connected."""

from __future__ import annotations

import re

import polars as pl

from forensics.ingest.gpu import (
    ANSI,
    GPU_TOPOLOGY,
    binary_problem,
)
from forensics.schema import conform, empty


def parse_topo(text: str, file: str, host: str | None = None) -> tuple[pl.DataFrame, str | None]:
    """`nvidia-smi topo -m` matrix -> GPU_TOPOLOGY rows (one per device/peer cell).

    Notes:
        Tab-separated; the header starts with a tab and may be ANSI-underlined; the
        matrix ends at the first blank line (before `Legend:`). NIC rows lack the
        affinity columns, which then stay null.
    """
    lines = text.replace("\r", "").split("\n")
    clean = [re.sub(ANSI, "", ln) for ln in lines]
    start = next((i for i, ln in enumerate(clean) if ln.startswith("\t") and "GPU0" in ln), None)
    if start is None:
        return empty(GPU_TOPOLOGY), binary_problem(text) or "no topology header (a tab-led line naming GPU0)"
    header = [c.strip() for c in clean[start].split("\t")[1:]]
    peers = [c for c in header if re.match(r"^(?:GPU|NIC|mlx)\w*$", c)]
    rows = []
    for offset, ln in enumerate(clean[start + 1 :], start=start + 2):
        if not ln.strip():
            break
        cells = [c.strip() for c in ln.split("\t")]
        device, values = cells[0], dict(zip(header, cells[1:], strict=False))
        for peer in peers:
            rows.append(
                {
                    "device": device,
                    "peer": peer,
                    "link": values.get(peer) or None,
                    "cpu_affinity": values.get("CPU Affinity") or None,
                    "numa_affinity": values.get("NUMA Affinity") or None,
                    "line": offset,
                }
            )
    if not rows:
        return empty(GPU_TOPOLOGY), "topology header without rows"
    frame = pl.DataFrame(rows).with_columns(host=pl.lit(host, dtype=pl.String), file=pl.lit(file))
    return conform(frame, GPU_TOPOLOGY), None
