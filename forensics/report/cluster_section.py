"""Markdown for the Cluster section: how NCCL was set up, measured bus bandwidth (nccl-tests),
InfiniBand port states, PCIe links below what they can run (lspci) and failed DCGM checks.

Rendering only: the `nccl_config` table of ingest.nccl, the `nccl_test_runs` and `ib_ports`
tables of ingest.fabric, `pcie_links` of ingest.pcie and `dcgm_diag` and `nvlink_status` of
ingest.dcgm in, markdown out; empty when none was found. Bounded: at most MAX_ROWS rows per
table, the rest counted.
"""

from __future__ import annotations

import polars as pl

from forensics.report.markup import cell, plural, table, where

MAX_ROWS = 32


def render_cluster(tables: dict[str, pl.DataFrame]) -> str:
    parts = []
    setup = _nccl_setup(tables)
    if not setup.is_empty():
        parts += ["### NCCL as the processes set it up", _setup(setup)]
    runs = tables.get("nccl_test_runs")
    if runs is not None and not runs.is_empty():
        parts += ["### Bus bandwidth measured by nccl-tests", _runs(runs)]
    ports = tables.get("ib_ports")
    if ports is not None and not ports.is_empty():
        parts += ["### InfiniBand ports", _ports(ports)]
    links = tables.get("pcie_links")
    if links is not None and not links.is_empty():
        parts += ["### PCIe links below what they can run", _links(links)]
    checks = _dcgm_failures(tables)
    if checks is not None:
        parts += ["### DCGM checks that failed", checks]
    return "\n\n".join(["## Cluster", *parts]) + "\n" if parts else ""


def _nccl_setup(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """(setting, value, processes, file, line): each distinct value of each NCCL setting
    (environment overrides, the network, channel counts) with how many processes reported it
    and the first line that did. The version and transports are in the collectives section."""
    config = tables.get("nccl_config")
    if config is None or config.is_empty():
        return pl.DataFrame(schema={"setting": pl.String, "value": pl.String, "processes": pl.UInt32, "file": pl.String, "line": pl.Int64})
    return (
        config.sort("file", "line")
        .group_by(pl.col("key").alias("setting"), "value", maintain_order=True)
        .agg(pl.struct("host", "pid").n_unique().alias("processes"), pl.col("file").first(), pl.col("line").first())
        .sort("setting", "processes", descending=[False, True], maintain_order=True)
    )


def _setup(setup: pl.DataFrame) -> str:
    rows = [
        (cell(r["setting"]), cell(r["value"]), cell(r["processes"]), where(r["file"], r["line"]))
        for r in setup.head(MAX_ROWS).iter_rows(named=True)
    ]
    more = f"\n\n… and {plural(setup.height - MAX_ROWS, 'more setting')}." if setup.height > MAX_ROWS else ""
    split = setup.filter(pl.col("setting").is_duplicated())["setting"].unique(maintain_order=True).to_list()
    note = f"\n\nThe processes did not run alike: {cell(', '.join(split))} differ between them." if split else ""
    return f"{table(['setting', 'value', 'processes', 'first said'], rows)}{more}{note}"


def _gbs(value: float | None) -> str:
    return f"{value:,.1f} GB/s" if value is not None else "—"


def _bytes(value: int | None) -> str:
    if value is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value} B"


def _runs(runs: pl.DataFrame) -> str:
    rows = [
        (
            where(r["file"], r["line"]),
            cell(r["ranks"]),
            cell(", ".join(r["hosts"] or []) or None),
            cell(r["gpu_model"]),
            _bytes(r["max_size_bytes"]),
            _gbs(r["max_size_busbw_gbs"]),
            _gbs(r["avg_busbw_gbs"]),
            cell(r["wrong"] if r["out_of_bounds"] is None else r["out_of_bounds"]),
        )  # fmt: skip
        for r in runs.head(MAX_ROWS).iter_rows(named=True)
    ]
    out = table(["run", "ranks", "hosts", "GPU", "largest size", "busbw there", "avg busbw", "wrong values"], rows)
    note = (
        "A run with no sizes stopped before its first result (see the errors above); compare busbw with the same test on known-good nodes."
    )
    more = f"\n\n… and {plural(runs.height - MAX_ROWS, 'more run')}." if runs.height > MAX_ROWS else ""
    return f"{out}\n\n{note}{more}"


def _ports(ports: pl.DataFrame) -> str:
    ordered = ports.sort(pl.col("state").str.to_lowercase() == "active", "host", "ca", "port", nulls_last=True)
    rows = [
        (
            cell(r["host"]),
            cell(r["ca"]),
            cell(r["port"]),
            cell(r["state"]),
            cell(r["physical_state"]),
            cell(f"{r['rate_gbps']:g} Gb/s" if r["rate_gbps"] is not None else None),
            where(r["file"], r["line"]),
        )  # fmt: skip
        for r in ordered.head(MAX_ROWS).iter_rows(named=True)
    ]
    more = f"\n\n… and {plural(ports.height - MAX_ROWS, 'more port')}." if ports.height > MAX_ROWS else ""
    return table(["host", "CA", "port", "state", "physical state", "rate", "where"], rows) + more


def _links(links: pl.DataFrame) -> str:
    below = links.filter(
        (pl.col("width") < pl.col("cap_width"))
        | (pl.col("speed_gts") < pl.col("cap_speed_gts"))
        | pl.col("width_downgraded")
        | pl.col("speed_downgraded")
    )
    if below.is_empty():
        return f"None: every link lspci showed ({plural(links.height, 'link')}) runs at the width and speed it can."
    narrow = ((pl.col("width") < pl.col("cap_width")) | pl.col("width_downgraded")).fill_null(False)
    ordered = below.sort(narrow, "host", "file", "line", descending=[True, False, False, False])
    rows = [
        (
            cell(r["host"]),
            cell(" ".join(v for v in (r["pci_bus_id"], r["device"]) if v) or None),
            _of(r["width"], r["cap_width"], r["width_downgraded"], "x{:g}"),
            _of(r["speed_gts"], r["cap_speed_gts"], r["speed_downgraded"], "{:g} GT/s"),
            where(r["file"], r["line"]),
        )
        for r in ordered.head(MAX_ROWS).iter_rows(named=True)
    ]
    note = (
        "A link narrower than it can run is a fault of its host (lanes that did not train); one that is only "
        "slower is usually an idle GPU saving power: check it under load."
    )
    more = f"\n\n… and {plural(below.height - MAX_ROWS, 'more link')}." if below.height > MAX_ROWS else ""
    return f"{table(['host', 'device', 'width', 'speed', 'where'], rows)}{more}\n\n{note}"


def _of(value: float | None, cap: float | None, downgraded: bool, unit: str) -> str:
    """`x8 of x16`, `2.5 GT/s of 16 GT/s`; `x1 (downgraded)` where the capability was not shown."""
    if value is None:
        return "—"
    if cap is not None:
        return f"{unit.format(value)} of {unit.format(cap)}"
    return unit.format(value) + (" (downgraded)" if downgraded else "")


def _dcgm_failures(tables: dict[str, pl.DataFrame]) -> str | None:
    """Failed `dcgmi diag` results and NVLinks Down in one table; None when dcgmi printed neither."""
    diag, nvlink = tables.get("dcgm_diag"), tables.get("nvlink_status")
    read = [frame for frame in (diag, nvlink) if frame is not None and not frame.is_empty()]
    if not read:
        return None
    rows = []
    if diag is not None:
        rows += [
            (cell(r["host"]), cell(f"diag {r['test']} ({r['section']})"), f"GPU {r['gpu']}" if r["gpu"] is not None else "—", "Fail", where(r["file"], r["line"]))
            for r in diag.filter(pl.col("result") == "Fail").iter_rows(named=True)
        ]  # fmt: skip
    if nvlink is not None:
        device = {"gpu": "GPU", "nvswitch": "NVSwitch"}
        rows += [
            (cell(r["host"]), "NVLink status", f"{device[r['entity']]} {r['id']}", f"{r['down']} of {r['links']} links Down", where(r["file"], r["line"]))
            for r in nvlink.filter(pl.col("down") > 0).iter_rows(named=True)
        ]  # fmt: skip
    if not rows:
        return f"None of the {plural(sum(frame.height for frame in read), 'result')} dcgmi printed failed."
    more = f"\n\n… and {plural(len(rows) - MAX_ROWS, 'more')}." if len(rows) > MAX_ROWS else ""
    return table(["host", "check", "device", "result", "where"], rows[:MAX_ROWS]) + more
