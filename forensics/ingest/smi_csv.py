"""`nvidia-smi --query-gpu` CSV (any column set, with or without units and header) -> GPU_SAMPLES rows."""

from __future__ import annotations

import re

import polars as pl

from forensics.ingest.gpu import (
    GPU_SAMPLES,
    REASON_BITS,
    binary_problem,
    clean_lines,
    distinct_names,
    first_column,
    flag,
    leading_count,
    leading_number,
    pci_bus_id,
    serial_number,
    sum_or_null,
    true_reasons,
    without_null_tokens,
)
from forensics.ingest.timestamps import line_time
from forensics.schema import InputKind, conform, empty

CSV_ALIASES = {
    "gpu_bus_id": "pci.bus_id",
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "clocks.sm": "clocks.current.sm",
    "retired_pages.sbe": "retired_pages.single_bit_ecc.count",
    "retired_pages.dbe": "retired_pages.double_bit.count",
}
CSV_FIELD_RE = re.compile(r"^[a-z_][a-z0-9_.]*[a-z0-9_](?: \[[^\]]+\])?$", re.I)
KNOWN_CSV_FIELDS = {
    "timestamp",
    "index",
    "name",
    "pci.bus_id",
    "gpu_bus_id",
    "uuid",
    "serial",
    "temperature.gpu",
    "power.draw",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "driver_version",
    "clocks.sm",
    "pstate",
}


def _csv_name(header_cell: str) -> str:
    name = re.sub(r" \[[^\]]*\]$", "", header_cell.strip()).lower()
    name = name.replace("clocks_throttle_reasons", "clocks_event_reasons")
    return CSV_ALIASES.get(name, name)


def _is_csv_header(line: str) -> bool:
    cells = [c.strip() for c in line.split(",")]
    return all(CSV_FIELD_RE.match(c) for c in cells) and any(c.lower().split(" [")[0] in KNOWN_CSV_FIELDS or "." in c for c in cells)


def _infer_csv_columns(cells: list[str]) -> list[str]:
    """Column names for a headerless CSV, from the look of one row (identity, W, %)."""
    names, watts, percents = [], 0, 0
    for cell in (c.strip() for c in cells):
        if re.match(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}", cell):
            names.append("timestamp")
        elif re.match(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$", cell):
            names.append("pci.bus_id")
        elif cell.startswith("GPU-"):
            names.append("uuid")
        elif cell.endswith(" W"):
            names.append(("power.draw", "power.limit")[min(watts, 1)] if watts < 2 else f"?{len(names)}")
            watts += 1
        elif cell.endswith(" %"):
            names.append(("utilization.gpu", "utilization.memory")[percents] if percents < 2 else f"?{len(names)}")
            percents += 1
        else:
            names.append(f"?{len(names)}")
    return names


def parse_gpu_csv(text: str, file: str, host: str | None = None, columns: list[str] | None = None) -> tuple[pl.DataFrame, str | None]:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` -> GPU_SAMPLES rows.

    Notes:
        Cells are split on `,` and stripped (nvidia-smi separates with `, `). The header
        (or `columns`, the field list of a `noheader` run) names the columns; repeated
        headers from concatenated runs are dropped. Without either, only timestamp, bus
        id, uuid, and the first W and % columns (power draw/limit, GPU/memory
        utilization) can be told from their look, and the problem says so.
    """
    problem = binary_problem(text)
    df = clean_lines(text).filter(pl.col("raw").str.strip_chars() != "")
    if df.is_empty():
        return empty(GPU_SAMPLES), problem or "empty file"
    first = df["raw"][0]
    header_text = None
    if columns is not None:
        names = [_csv_name(c) for c in columns]
    elif _is_csv_header(first):
        header_text = first
        names = [_csv_name(c) for c in first.split(",")]
    else:
        names = [_csv_name(c) for c in _infer_csv_columns(first.split(","))]
        problem = problem or "no CSV header: columns inferred from their values (identity, power, utilization only)"
    names = distinct_names(names)  # a repeated field keeps its first column
    if header_text is not None:
        df = df.filter(pl.col("raw") != header_text)
    cells = pl.col("raw").str.split(",")
    df = (
        df.filter(cells.list.len() == len(names)).with_columns(
            [cells.list.get(i).str.strip_chars().alias(name) for i, name in enumerate(names)]
        )
        if names
        else df.head(0)
    )
    dropped = clean_lines(text).filter(pl.col("raw").str.strip_chars() != "").height - df.height - (header_text is not None)
    if dropped > 0 and problem is None:
        problem = f"{dropped} line(s) with a different number of cells were skipped (truncated or mixed queries)"
    if df.is_empty():
        return empty(GPU_SAMPLES), problem or "no data rows"
    return _csv_samples(df, file, host), problem


def _csv_samples(df: pl.DataFrame, file: str, host: str | None) -> pl.DataFrame:
    prefix = "clocks_event_reasons."
    mask = without_null_tokens(first_column(df, prefix + "active")).str.replace(r"^0[xX]", "").str.to_integer(base=16, strict=False)
    reason_cols = {
        "hw_slowdown": "hw_slowdown",
        "hw_thermal": "hw_thermal_slowdown",
        "sw_thermal": "sw_thermal_slowdown",
        "sw_power_cap": "sw_power_cap",
        "power_brake": "hw_power_brake_slowdown",
    }
    flags = {
        reason: pl.coalesce(flag(first_column(df, prefix + col)), (mask & REASON_BITS[reason]) != 0) for reason, col in reason_cols.items()
    }
    out = df.with_columns(
        host=pl.lit(host, dtype=pl.String),
        gpu=leading_count(first_column(df, "index")).cast(pl.Int32),
        pci_bus_id=pci_bus_id(without_null_tokens(first_column(df, "pci.bus_id"))),
        uuid=without_null_tokens(first_column(df, "uuid")),
        serial=serial_number(first_column(df, "serial")),
        name=without_null_tokens(first_column(df, "name")),
        time=line_time(first_column(df, "timestamp").fill_null(""), 1970),
        source=pl.lit(InputKind.NVIDIA_SMI_CSV.value),
        temperature_c=leading_number(first_column(df, "temperature.gpu")),
        power_draw_w=leading_number(first_column(df, "power.draw", "power.draw.average", "power.draw.instant")),
        power_limit_w=leading_number(first_column(df, "power.limit", "enforced.power.limit")),
        sm_util_pct=leading_number(first_column(df, "utilization.gpu")),
        mem_util_pct=leading_number(first_column(df, "utilization.memory")),
        memory_used_mib=leading_number(first_column(df, "memory.used")),
        memory_total_mib=leading_number(first_column(df, "memory.total")),
        sm_clock_mhz=leading_number(first_column(df, "clocks.current.sm")),
        throttle_reasons=true_reasons(flags),
        ecc_corrected_volatile=leading_count(first_column(df, "ecc.errors.corrected.volatile.total")),
        ecc_uncorrected_volatile=leading_count(first_column(df, "ecc.errors.uncorrected.volatile.total")),
        ecc_corrected_aggregate=leading_count(first_column(df, "ecc.errors.corrected.aggregate.total")),
        ecc_uncorrected_aggregate=leading_count(first_column(df, "ecc.errors.uncorrected.aggregate.total")),
        retired_pages=sum_or_null(
            [
                leading_count(first_column(df, "retired_pages.single_bit_ecc.count")),
                leading_count(first_column(df, "retired_pages.double_bit.count")),
            ]
        ),
        retired_pages_pending=flag(first_column(df, "retired_pages.pending")),
        remapped_rows_correctable=leading_count(first_column(df, "remapped_rows.correctable")),
        remapped_rows_uncorrectable=leading_count(first_column(df, "remapped_rows.uncorrectable")),
        remapped_rows_pending=flag(first_column(df, "remapped_rows.pending")),
        remapped_rows_failure=flag(first_column(df, "remapped_rows.failure")),
        file=pl.lit(file),
    )
    return conform(out, GPU_SAMPLES)
