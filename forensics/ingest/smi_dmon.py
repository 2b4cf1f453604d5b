"""`nvidia-smi dmon` -> GPU_SAMPLES rows and `nvidia-smi pmon` -> GPU_PROCESSES rows."""

from __future__ import annotations

import polars as pl

from forensics.ingest.gpu import (
    GPU_PROCESSES,
    GPU_SAMPLES,
    binary_problem,
    clean_lines,
    distinct_names,
    first_column,
    leading_count,
    leading_number,
    true_reasons,
    without_null_tokens,
)
from forensics.ingest.timestamps import line_time
from forensics.schema import InputKind, conform, empty

DMON_COLUMNS = {
    "pwr": "power_draw_w",
    "gtemp": "temperature_c",
    "temp": "temperature_c",
    "sm": "sm_util_pct",
    "mem": "mem_util_pct",
    "pclk": "sm_clock_mhz",
    "fb": "memory_used_mib",
    "sbecc": "ecc_corrected_volatile",
    "dbecc": "ecc_uncorrected_volatile",
}


def _dmon_rows(text: str) -> tuple[pl.DataFrame, list[str], str | None]:
    """Data rows split on whitespace, with the column names of the `#` header above them."""
    df = clean_lines(text)
    is_header = pl.col("raw").str.starts_with("#")
    df = df.with_columns(
        header=pl.when(is_header & ~is_header.shift(1, fill_value=False)).then(pl.col("raw")),
    ).with_columns(pl.col("header").forward_fill())
    rows = df.filter(~is_header & (pl.col("raw").str.strip_chars() != "") & pl.col("header").is_not_null())
    headers = rows["header"].unique(maintain_order=True).to_list()
    if not headers:
        return rows.head(0), [], "no `# gpu ...` header line found"
    problem = None
    if len(headers) > 1:
        problem = f"{len(headers)} different header layouts; only the first is read"
    names = distinct_names([n.lower() for n in headers[0].lstrip("#").split()])
    if not names:
        return rows.head(0), [], "an empty `#` header line"
    rows = rows.filter(pl.col("header") == headers[0])
    tokens = pl.col("raw").str.strip_chars().str.replace_all(r"\s+", " ").str.split(" ")
    good = rows.filter(tokens.list.len() >= len(names))
    if good.height < rows.height:
        problem = problem or f"{rows.height - good.height} short row(s) skipped"
    good = good.with_columns(
        [tokens.list.get(i).alias(f"c_{name}") for i, name in enumerate(names[:-1])]
        + [tokens.list.slice(len(names) - 1).list.join(" ").alias(f"c_{names[-1]}")]
    )
    return good, names, problem


def _dmon_time(rows: pl.DataFrame) -> pl.Expr:
    date = first_column(rows, "c_date")
    clock = first_column(rows, "c_time")
    iso = pl.concat_str(date.str.slice(0, 4), pl.lit("-"), date.str.slice(4, 2), pl.lit("-"), date.str.slice(6, 2), pl.lit(" "), clock)
    return line_time(iso.fill_null(""), 1970)


def parse_dmon(text: str, file: str, host: str | None = None) -> tuple[pl.DataFrame, str | None]:
    """`nvidia-smi dmon` text -> GPU_SAMPLES rows.

    Notes:
        Column names come from the first of the two `#` header lines; repeated headers
        are skipped; `-` is null. Rows carry a time only with `-o DT` (`#Date Time`
        columns); otherwise time is null and `line` keeps their order. `pviol` > 0 and
        `tviol` > 0 become the `power_violation` / `thermal_violation` reasons.
    """
    problem = binary_problem(text)
    rows, names, read_problem = _dmon_rows(text)
    problem = problem or read_problem
    if not names or "pid" in names or rows.is_empty():
        return empty(GPU_SAMPLES), problem or ("pmon output, not dmon" if "pid" in names else "no data rows")
    metrics = {column: leading_number(pl.col(f"c_{name}")) for name, column in DMON_COLUMNS.items() if name in names}
    flags = {
        "power_violation": leading_number(first_column(rows, "c_pviol")) > 0,
        "thermal_violation": leading_number(first_column(rows, "c_tviol")) > 0,
    }
    out = rows.with_columns(
        host=pl.lit(host, dtype=pl.String),
        gpu=leading_count(first_column(rows, "c_gpu")).cast(pl.Int32),
        time=_dmon_time(rows),
        source=pl.lit(InputKind.NVIDIA_SMI_DMON.value),
        throttle_reasons=true_reasons(flags),
        file=pl.lit(file),
        **{column: expr for column, expr in metrics.items()},
    ).with_columns(
        ecc_corrected_volatile=pl.col("ecc_corrected_volatile").cast(pl.Int64) if "sbecc" in names else pl.lit(None),
        ecc_uncorrected_volatile=pl.col("ecc_uncorrected_volatile").cast(pl.Int64) if "dbecc" in names else pl.lit(None),
    )
    samples = conform(out.filter(pl.col("gpu").is_not_null()), GPU_SAMPLES)
    if samples.is_empty():
        problem = problem or "no row names a GPU index (no `# gpu ...` names line above the rows?)"
    return samples, problem


def parse_pmon(text: str, file: str, host: str | None = None) -> tuple[pl.DataFrame, str | None]:
    """`nvidia-smi pmon` text -> GPU_PROCESSES rows (which pid ran on which GPU)."""
    problem = binary_problem(text)
    rows, names, read_problem = _dmon_rows(text)
    problem = problem or read_problem
    if "pid" not in names or rows.is_empty():
        return empty(GPU_PROCESSES), problem or "no pmon rows"
    out = rows.with_columns(
        host=pl.lit(host, dtype=pl.String),
        gpu=leading_count(pl.col("c_gpu")).cast(pl.Int32),
        pid=leading_count(pl.col("c_pid")),
        type=without_null_tokens(first_column(rows, "c_type")),
        process=without_null_tokens(first_column(rows, "c_command")),
        sm_util_pct=leading_number(first_column(rows, "c_sm")),
        time=_dmon_time(rows),
        file=pl.lit(file),
    ).filter(pl.col("pid").is_not_null())
    return conform(out, GPU_PROCESSES), problem
