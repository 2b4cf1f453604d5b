"""What every nvidia-smi reader shares: the GPU frames, value cleaning and PCI bus ids.

The readers of reference/formats.md 7.1-7.4 are one module each: smi_query (`nvidia-smi -q`,
text and `-x` XML), smi_csv (`--query-gpu` CSV), smi_dmon (`dmon`/`pmon`) and smi_topo
(`topo -m`); gpu_sniff tells them apart. Every parser takes the decoded text plus the file
name to cite and returns `(frame, problem)`: the frame holds whatever could be read,
`problem` says why it is partial (None when all of it parsed). Nothing here judges health;
passes/gpu_health.py does.

Assumptions: nvidia-smi times carry no zone and are taken as UTC, like every other
zone-less time in forensics; `-q` lists GPUs in nvidia-smi index order, so a GPU's
index is its position within a dump of every attached GPU (a dump filtered with `-i`
leaves it unknown). PCI ids from nvidia-smi, kernel Xid lines and
NCCL `busId` are all normalized to `00000000:BB:DD.F` (see `pci_bus_id`).
"""

from __future__ import annotations

import polars as pl

from forensics.schema import TIME

# One row per GPU per sampling instant, whatever nvidia-smi mode produced it.
GPU_SAMPLES: dict[str, pl.DataType] = {
    "host": pl.String,
    "gpu": pl.Int32,  # nvidia-smi index on its host
    "pci_bus_id": pl.String,  # normalized 00000000:BB:DD.F
    "uuid": pl.String,
    "serial": pl.String,  # the board's serial number (null where nvidia-smi prints N/A or zeros)
    "name": pl.String,
    "time": TIME,  # null where the mode prints none (dmon without -o T)
    "source": pl.String,  # InputKind of the file
    "temperature_c": pl.Float64,
    # degrees left before the GPU's own slowdown threshold (-q: `GPU Slowdown Temp` minus the
    # current temperature; newer drivers: `GPU T.Limit Temp` minus `GPU Slowdown T.Limit Temp`)
    "thermal_headroom_c": pl.Float64,
    "power_draw_w": pl.Float64,
    "power_limit_w": pl.Float64,
    "sm_util_pct": pl.Float64,
    "mem_util_pct": pl.Float64,
    "memory_used_mib": pl.Float64,
    "memory_total_mib": pl.Float64,
    "sm_clock_mhz": pl.Float64,
    # active clock-event reasons: hw_slowdown hw_thermal sw_thermal sw_power_cap power_brake
    # (dmon adds thermal_violation / power_violation from its tviol / pviol columns)
    "throttle_reasons": pl.List(pl.String),
    "ecc_corrected_volatile": pl.Int64,
    "ecc_uncorrected_volatile": pl.Int64,
    "ecc_corrected_aggregate": pl.Int64,
    "ecc_uncorrected_aggregate": pl.Int64,
    "retired_pages": pl.Int64,
    "retired_pages_pending": pl.Boolean,
    "remapped_rows_correctable": pl.Int64,
    "remapped_rows_uncorrectable": pl.Int64,
    "remapped_rows_pending": pl.Boolean,
    "remapped_rows_failure": pl.Boolean,
    "file": pl.String,
    "line": pl.Int64,
}

# One row per process seen on a GPU (pmon).
GPU_PROCESSES: dict[str, pl.DataType] = {
    "host": pl.String,
    "gpu": pl.Int32,
    "pid": pl.Int64,
    "type": pl.String,
    "process": pl.String,
    "sm_util_pct": pl.Float64,
    "time": TIME,
    "file": pl.String,
    "line": pl.Int64,
}

# One row per (device, peer) cell of `topo -m`, affinity columns repeated per row.
GPU_TOPOLOGY: dict[str, pl.DataType] = {
    "host": pl.String,
    "device": pl.String,  # GPU0, NIC1, ...
    "peer": pl.String,
    "link": pl.String,  # X, NV18, PIX, PXB, PHB, NODE, SYS
    "cpu_affinity": pl.String,
    "numa_affinity": pl.String,
    "file": pl.String,
    "line": pl.Int64,
}

REASONS = ("hw_slowdown", "hw_thermal", "sw_thermal", "sw_power_cap", "power_brake")
# nvmlClocksEventReason* bits, as printed in clocks_event_reasons.active
REASON_BITS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "power_brake": 0x80}
NULL_TOKENS = [
    "N/A",
    "[N/A]",
    "[Not Supported]",
    "Not Supported",
    "Requested functionality has been deprecated",
    "[Requested functionality has been deprecated]",
    "Unknown Error",
    "[Unknown Error]",
    "[GPU requires reset]",
    "GPU requires reset",
    "-",
    "",
]
ANSI = r"\x1b\[[0-9;]*[A-Za-z]"
NUMBER = r"^\s*(-?\d+(?:\.\d+)?)"


# ---------------------------------------------------------------------------------------
# PCI bus ids


def pci_bus_id(expr: pl.Expr) -> pl.Expr:
    """Expression: any PCI id form -> `00000000:BB:DD.F` (upper case), null when unreadable.

    Accepts nvidia-smi `00000000:2B:00.0`, kernel `PCI:0000:2b:00` / `0000:2b:00.0` /
    `2b:00` (no domain, no function -> 0) and NCCL `busId` `2b000`, the id's hex digits
    read as one number: last digit function, two device, two bus, the rest domain.
    """
    s = expr.str.strip_chars().str.to_lowercase().str.replace(r"^pci:", "")
    parts = s.str.extract_groups(r"^(?:(?P<dom>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})(?:\.(?P<fn>[0-7]))?$")
    colon = pl.concat_str(
        parts.struct.field("dom").fill_null("0").str.pad_start(8, "0"),
        pl.lit(":"),
        parts.struct.field("bus").str.pad_start(2, "0"),
        pl.lit(":"),
        parts.struct.field("dev").str.pad_start(2, "0"),
        pl.lit("."),
        parts.struct.field("fn").fill_null("0"),
    )
    digits = pl.when(s.str.contains(r"^[0-9a-f]{1,13}$")).then(s.str.pad_start(9, "0"))
    nccl = pl.when(digits.str.len_chars() <= 13).then(
        pl.concat_str(
            digits.str.head(-5).str.pad_start(8, "0"),
            pl.lit(":"),
            digits.str.slice(-5, 2),
            pl.lit(":"),
            digits.str.slice(-3, 2),
            pl.lit("."),
            digits.str.tail(1),
        )
    )
    return pl.coalesce(colon, nccl).str.to_uppercase()


# ---------------------------------------------------------------------------------------
# shared helpers


def clean_lines(text: str) -> pl.DataFrame:
    """Physical lines with 1-based numbers, `\\r` and ANSI escapes removed."""
    lines = pl.Series("raw", text.split("\n"), dtype=pl.String)
    return pl.DataFrame({"line": pl.int_range(1, len(lines) + 1, eager=True, dtype=pl.Int64), "raw": lines}).with_columns(
        raw=pl.col("raw").str.replace_all(ANSI, "").str.strip_chars_end("\r")
    )


def without_null_tokens(expr: pl.Expr) -> pl.Expr:
    value = expr.str.strip_chars()
    return pl.when(value.is_in(NULL_TOKENS)).then(None).otherwise(value)


def serial_number(expr: pl.Expr) -> pl.Expr:
    """A board serial number; null for N/A and for the all-zero one virtual GPUs report."""
    value = without_null_tokens(expr)
    return pl.when(value.str.contains(r"^0*$")).then(None).otherwise(value)


def leading_number(expr: pl.Expr) -> pl.Expr:
    """Leading number of a value with or without unit (`629.45 W`, `100 %`, `[N/A]`)."""
    return without_null_tokens(expr).str.extract(NUMBER).cast(pl.Float64, strict=False)


def leading_count(expr: pl.Expr) -> pl.Expr:
    return leading_number(expr).cast(pl.Int64, strict=False)


def flag(expr: pl.Expr) -> pl.Expr:
    """Active/Yes/Enabled/1 -> True, Not Active/No/0 -> False, anything else -> null."""
    value = without_null_tokens(expr).str.to_lowercase()
    return (
        pl.when(value.is_in(["active", "yes", "enabled", "1", "true"]))
        .then(True)
        .when(value.is_in(["not active", "no", "disabled", "0", "false"]))
        .then(False)
    )


def true_reasons(flags: dict[str, pl.Expr]) -> pl.Expr:
    """List of the reason names whose flag is true."""
    present = [pl.when(expr).then(pl.lit(name)) for name, expr in flags.items()]
    if not present:
        return pl.lit(None, dtype=pl.List(pl.String))
    return pl.concat_list(present).list.drop_nulls()


def sum_or_null(parts: list[pl.Expr]) -> pl.Expr:
    """Sum of the parts that are present; null when none is."""
    if not parts:
        return pl.lit(None, dtype=pl.Int64)
    return pl.when(pl.any_horizontal([p.is_not_null() for p in parts])).then(pl.sum_horizontal(parts))


def first_column(df: pl.DataFrame, *names: str) -> pl.Expr:
    """The first of `names` that is a column of df, coalesced over all that are; else null."""
    present = [pl.col(n) for n in names if n in df.columns]
    if not present:
        return pl.lit(None, dtype=pl.String)
    return pl.coalesce(present) if len(present) > 1 else present[0]


def binary_problem(text: str) -> str | None:
    bad = text.count("\x00") + text.count("\ufffd")
    if bad and bad > max(8, len(text) // 1000):
        return f"binary or undecodable content ({bad} bad characters)"
    return None


def distinct_names(names: list[str]) -> list[str]:
    """Header names made unique: a dmon units line (`#HH:MM:SS Idx W C C %`) or a CSV header
    that asks for one field twice repeats some; each repeat becomes `name#2`, `name#3`."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out
