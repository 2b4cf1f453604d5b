"""nvidia-smi output -> GPU samples, processes and topology frames.

Reads the text forms of reference/formats.md 7.1-7.4: `nvidia-smi -q` (both section-name
generations, many GPUs, many concatenated dumps), `--query-gpu` CSV (any column set,
with or without units and header), `dmon`/`pmon` and `topo -m`. Every parser takes the
decoded text plus the file name to cite and returns `(frame, problem)`: the frame holds
whatever could be read, `problem` says why it is partial (None when all of it parsed).
Nothing here judges health; passes/gpu_health.py does.

Assumptions: nvidia-smi times carry no zone and are taken as UTC, like every other
zone-less time in forensics; `-q` lists GPUs in nvidia-smi index order, so a GPU's
index is its position within a dump of every attached GPU (a dump filtered with `-i`
leaves it unknown). PCI ids from nvidia-smi, kernel Xid lines and
NCCL `busId` are all normalized to `00000000:BB:DD.F` (see `pci_bus_id`).
"""

from __future__ import annotations

import re

import polars as pl

from forensics.ingest.timestamps import line_time
from forensics.schema import TIME, InputKind, conform, empty

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


def _lines(text: str) -> pl.DataFrame:
    """Physical lines with 1-based numbers, `\\r` and ANSI escapes removed."""
    lines = pl.Series("raw", text.split("\n"), dtype=pl.String)
    return pl.DataFrame({"line": pl.int_range(1, len(lines) + 1, eager=True, dtype=pl.Int64), "raw": lines}).with_columns(
        raw=pl.col("raw").str.replace_all(ANSI, "").str.strip_chars_end("\r")
    )


def _null_tokens(expr: pl.Expr) -> pl.Expr:
    value = expr.str.strip_chars()
    return pl.when(value.is_in(NULL_TOKENS)).then(None).otherwise(value)


def _serial(expr: pl.Expr) -> pl.Expr:
    """A board serial number; null for N/A and for the all-zero one virtual GPUs report."""
    value = _null_tokens(expr)
    return pl.when(value.str.contains(r"^0*$")).then(None).otherwise(value)


def _number(expr: pl.Expr) -> pl.Expr:
    """Leading number of a value with or without unit (`629.45 W`, `100 %`, `[N/A]`)."""
    return _null_tokens(expr).str.extract(NUMBER).cast(pl.Float64, strict=False)


def _count(expr: pl.Expr) -> pl.Expr:
    return _number(expr).cast(pl.Int64, strict=False)


def _flag(expr: pl.Expr) -> pl.Expr:
    """Active/Yes/Enabled/1 -> True, Not Active/No/0 -> False, anything else -> null."""
    value = _null_tokens(expr).str.to_lowercase()
    return (
        pl.when(value.is_in(["active", "yes", "enabled", "1", "true"]))
        .then(True)
        .when(value.is_in(["not active", "no", "disabled", "0", "false"]))
        .then(False)
    )


def _reasons(flags: dict[str, pl.Expr]) -> pl.Expr:
    """List of the reason names whose flag is true."""
    present = [pl.when(expr).then(pl.lit(name)) for name, expr in flags.items()]
    if not present:
        return pl.lit(None, dtype=pl.List(pl.String))
    return pl.concat_list(present).list.drop_nulls()


def _sum_or_null(parts: list[pl.Expr]) -> pl.Expr:
    """Sum of the parts that are present; null when none is."""
    if not parts:
        return pl.lit(None, dtype=pl.Int64)
    return pl.when(pl.any_horizontal([p.is_not_null() for p in parts])).then(pl.sum_horizontal(parts))


def _col(df: pl.DataFrame, *names: str) -> pl.Expr:
    """The first of `names` that is a column of df, coalesced over all that are; else null."""
    present = [pl.col(n) for n in names if n in df.columns]
    if not present:
        return pl.lit(None, dtype=pl.String)
    return pl.coalesce(present) if len(present) > 1 else present[0]


def _binary_problem(text: str) -> str | None:
    bad = text.count("\x00") + text.count("\ufffd")
    if bad and bad > max(8, len(text) // 1000):
        return f"binary or undecodable content ({bad} bad characters)"
    return None


# ---------------------------------------------------------------------------------------
# nvidia-smi -q

_Q_SECTIONS = 6  # deepest nesting level (4-space steps) a -q value sits at


def _ecc_fields(section: str, sram_c: str, sram_u: str, parity: str, secded: str) -> dict[str, str]:
    """ECC counter paths of both scopes and driver generations -> `ecc_{c|u}_{scope}_{name}` fields,
    in one report's spelling (`-q` words with spaces, `-q -x` tags with underscores)."""
    sep = "_" if "_" in section else " "
    corrected = (sram_c, f"dram{sep}correctable", f"single{sep}bit/total")
    uncorrected = (sram_u, parity, secded, f"dram{sep}uncorrectable", f"double{sep}bit/total")
    return {
        f"{section}/{scope}/{name}": f"ecc_{kind}_{scope}_{name}"
        for scope in ("volatile", "aggregate")
        for kind, names in (("c", corrected), ("u", uncorrected))
        for name in names
    }


def _q_fields() -> dict[str, str]:
    """Lower-case section path of a -q value -> the field it feeds (both generations)."""
    fields = {
        "product name": "name",
        "gpu uuid": "uuid",
        "serial number": "serial",
        "temperature/gpu current temp": "temperature_c",
        "temperature/gpu slowdown temp": "slowdown_temp",
        "temperature/gpu t.limit temp": "tlimit_headroom",
        "temperature/gpu slowdown t.limit temp": "slowdown_tlimit",
        "power readings/power draw": "power_draw",
        "gpu power readings/power draw": "power_draw",
        "power readings/average power draw": "power_avg",
        "gpu power readings/average power draw": "power_avg",
        "power readings/instantaneous power draw": "power_inst",
        "gpu power readings/instantaneous power draw": "power_inst",
        "gpu power readings/current power limit": "limit_current",
        "power readings/current power limit": "limit_current",
        "gpu power readings/enforced power limit": "limit_enforced",
        "power readings/enforced power limit": "limit_enforced",
        "gpu power readings/power limit": "limit_plain",
        "power readings/power limit": "limit_plain",
        "utilization/gpu": "sm_util_pct",
        "utilization/memory": "mem_util_pct",
        "fb memory usage/used": "memory_used_mib",
        "fb memory usage/total": "memory_total_mib",
        "clocks/sm": "sm_clock_mhz",
        "retired pages/single bit ecc": "retired_sbe",
        "retired pages/double bit ecc": "retired_dbe",
        "retired pages/pending page blacklist": "retired_pending",
        "retired pages/pending page retirement": "retired_pending",
        "remapped rows/correctable error": "remapped_rows_correctable",
        "remapped rows/uncorrectable error": "remapped_rows_uncorrectable",
        "remapped rows/pending": "remapped_rows_pending",
        "remapped rows/remapping failure occurred": "remapped_rows_failure",
    }
    reason_keys = {
        "hw slowdown": "hw_slowdown",
        "hw thermal slowdown": "hw_thermal",
        "sw thermal slowdown": "sw_thermal",
        "sw power cap": "sw_power_cap",
        "hw power brake slowdown": "power_brake",
    }
    for section in ("clocks event reasons", "clocks throttle reasons"):
        for key, reason in reason_keys.items():
            fields[f"{section}/{key}"] = f"reason_{reason}"
    fields.update(
        _ecc_fields("ecc errors", "sram correctable", "sram uncorrectable", "sram uncorrectable parity", "sram uncorrectable sec-ded")
    )
    return fields


Q_FIELDS = _q_fields()
Q_GPU_HEADER = r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$"


def parse_nvidia_smi_query(text: str, file: str, host: str | None = None) -> tuple[pl.DataFrame, str | None]:
    """`nvidia-smi -q` text (one or many concatenated dumps) -> GPU_SAMPLES rows.

    Notes:
        Nesting is by 4-space indentation; a line without ` : ` opens a section. Each
        value gets its section path (`Clocks Event Reasons/HW Thermal Slowdown`) by
        forward-filling the last header seen at every depth, reset by any shallower
        line; known paths of both driver generations map to sample columns. A new
        `Timestamp` line at column 0 starts a new dump.
    """
    problem = _binary_problem(text)
    df = _lines(text)
    body = pl.col("raw").str.strip_chars()
    indent = pl.col("raw").str.len_chars() - pl.col("raw").str.strip_chars_start(" ").str.len_chars()
    kv = body.str.extract_groups(r"^(?P<key>.*?)\s+:(?:\s(?P<value>.*))?$")
    df = df.with_columns(
        body=body,
        level=(indent // 4).cast(pl.Int32),
        key=kv.struct.field("key").str.strip_chars().str.to_lowercase(),
        value=kv.struct.field("value").str.strip_chars(),
        gpu_header=body.str.extract(Q_GPU_HEADER),
    ).with_columns(
        is_section=pl.col("key").is_null() & (pl.col("body") != "") & pl.col("gpu_header").is_null() & ~pl.col("body").str.starts_with("="),
        is_stamp=((pl.col("level") == 0) & (pl.col("key") == "timestamp")).fill_null(False),
    )
    if df["gpu_header"].is_null().all():
        return empty(GPU_SAMPLES), problem or "no `GPU <bus id>` section found"

    opens_gpu = pl.col("gpu_header").is_not_null()
    df = df.with_columns(
        *[
            pl.when(pl.col("is_section") & (pl.col("level") == depth))
            .then(pl.col("body").str.to_lowercase())
            .when((pl.col("body") != "") & (pl.col("level") <= depth))
            .then(pl.lit(""))
            .alias(f"sec{depth}")
            for depth in range(1, _Q_SECTIONS)
        ],
        dump=pl.col("is_stamp").cum_sum(),
        stamp=pl.when(pl.col("is_stamp")).then(pl.col("value")),
        bus=pl.when(opens_gpu).then(pl.col("gpu_header")).when(pl.col("is_stamp")).then(pl.lit("")),
    ).with_columns(
        pl.col("stamp").forward_fill().over("dump"),
        pl.col("bus").forward_fill(),
        *[pl.col(f"sec{d}").forward_fill() for d in range(1, _Q_SECTIONS)],
        gpu_line=pl.when(opens_gpu).then(pl.col("line")).forward_fill(),
        gpu=opens_gpu.cast(pl.Int32).cum_sum().over("dump") - 1,
    )
    path = pl.concat_str(
        [pl.when(pl.col(f"sec{d}") != "").then(pl.col(f"sec{d}")) for d in range(1, _Q_SECTIONS)] + [pl.col("key")],
        separator="/",
        ignore_nulls=True,
    )
    values = (
        df.filter(pl.col("key").is_not_null() & (pl.col("bus").fill_null("") != ""))
        .with_columns(field=path.replace_strict(Q_FIELDS, default=None))
        .filter(pl.col("field").is_not_null())
    )
    attached = pl.when((pl.col("level") == 0) & (pl.col("key") == "attached gpus")).then(pl.col("value"))
    gpus = df.with_columns(attached=attached.drop_nulls().first().over("dump")).filter(opens_gpu)
    gpus = gpus.select("dump", "gpu", "bus", "stamp", "attached", line="gpu_line")
    return _dump_samples(values, gpus, file, host, problem, InputKind.NVIDIA_SMI_QUERY)


def _dump_samples(
    values: pl.DataFrame, gpus: pl.DataFrame, file: str, host: str | None, problem: str | None, source: InputKind
) -> tuple[pl.DataFrame, str | None]:
    """(dump, gpu, field, value) rows and one row per GPU section (dump, gpu, bus, stamp, attached, line) -> GPU_SAMPLES.

    A dump listing fewer GPUs than it says are attached was filtered (`-i 3`): a GPU's position
    in it is not its index, nor is its Minor Number (NVIDIA/nvidia-installer#21), so the index
    is left unknown and the bus id identifies the GPU."""
    if values.is_empty():
        wide = gpus
    else:
        wide = values.pivot(on="field", index=["dump", "gpu"], values="value", aggregate_function="first", sort_columns=True).join(
            gpus, on=["dump", "gpu"], how="right"
        )
    filtered = pl.len().over("dump") < pl.col("attached").cast(pl.Int64, strict=False)
    wide = wide.with_columns(gpu=pl.when(filtered.fill_null(False)).then(None).otherwise(pl.col("gpu")))
    samples = _q_samples(wide, file, host, source)
    if samples["time"].is_null().any() and problem is None:
        problem = "some dumps carry no readable Timestamp line"
    return samples, problem


# ---------------------------------------------------------------------------------------
# nvidia-smi -q -x


def _xml_fields() -> dict[str, str]:
    """Element path under `<gpu>` (both driver generations) -> the -q field it feeds."""
    fields = {
        "product_name": "name",
        "uuid": "uuid",
        "serial": "serial",
        "temperature/gpu_temp": "temperature_c",
        "temperature/gpu_temp_slow_threshold": "slowdown_temp",
        "temperature/gpu_temp_tlimit": "tlimit_headroom",
        "temperature/gpu_temp_slow_tlimit_threshold": "slowdown_tlimit",
        "utilization/gpu_util": "sm_util_pct",
        "utilization/memory_util": "mem_util_pct",
        "fb_memory_usage/used": "memory_used_mib",
        "fb_memory_usage/total": "memory_total_mib",
        "clocks/sm_clock": "sm_clock_mhz",
        "retired_pages/multiple_single_bit_retirement/retired_count": "retired_sbe",
        "retired_pages/double_bit_retirement/retired_count": "retired_dbe",
        "retired_pages/pending_blacklist": "retired_pending",
        "retired_pages/pending_retirement": "retired_pending",
        "remapped_rows/remapped_row_corr": "remapped_rows_correctable",
        "remapped_rows/remapped_row_unc": "remapped_rows_uncorrectable",
        "remapped_rows/remapped_row_pending": "remapped_rows_pending",
        "remapped_rows/remapped_row_failure": "remapped_rows_failure",
    }
    for section in ("power_readings", "gpu_power_readings"):
        for tag, field in (("power_draw", "power_draw"), ("average_power_draw", "power_avg"), ("instant_power_draw", "power_inst"),
                           ("current_power_limit", "limit_current"), ("enforced_power_limit", "limit_enforced"),
                           ("power_limit", "limit_plain")):  # fmt: skip
            fields[f"{section}/{tag}"] = field
    for word in ("event", "throttle"):
        for tag, reason in (("hw_slowdown", "hw_slowdown"), ("hw_thermal_slowdown", "hw_thermal"), ("sw_thermal_slowdown", "sw_thermal"),
                            ("sw_power_cap", "sw_power_cap"), ("hw_power_brake_slowdown", "power_brake")):  # fmt: skip
            fields[f"clocks_{word}_reasons/clocks_{word}_reason_{tag}"] = f"reason_{reason}"
    fields.update(
        _ecc_fields("ecc_errors", "sram_correctable", "sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded")
    )
    return fields


XML_FIELDS = _xml_fields()
_XML_LINE = r"^\s*<(?P<close>/)?(?P<tag>[A-Za-z_][\w.-]*)(?P<attrs>[^>]*?)(?P<empty>/)?>(?:(?P<value>[^<]*)</[\w.-]+>)?\s*$"
_XML_DEPTH = 8  # deepest element nesting a mapped value sits at


def parse_nvidia_smi_xml(text: str, file: str, host: str | None = None) -> tuple[pl.DataFrame, str | None]:
    """`nvidia-smi -q -x` XML (one or many concatenated dumps) -> GPU_SAMPLES rows, as `-q` gives.

    Notes:
        nvidia-smi writes one element per line, so the file is read line by line, never as a
        document: no entity is expanded and nothing outside it is fetched. An opening tag
        (`<temperature>`) deepens the path, its closing tag leaves it, and a line that holds
        `<tag>value</tag>` is a value at the current path; `<gpu id="...">` opens a GPU and
        `<nvidia_smi_log>` a new dump, whose `<timestamp>` dates every GPU in it.
    """
    problem = _binary_problem(text)
    parts = pl.col("raw").str.extract_groups(_XML_LINE)
    df = _lines(text).with_columns(parts=parts).unnest("parts")
    opens = pl.col("tag").is_not_null() & pl.col("close").is_null() & pl.col("value").is_null() & pl.col("empty").is_null()
    closes = pl.col("close").is_not_null()
    df = df.with_columns(opens=opens.fill_null(False), closes=closes.fill_null(False)).with_columns(
        after=(pl.col("opens").cast(pl.Int32) - pl.col("closes").cast(pl.Int32)).cum_sum()
    )
    level = pl.when(pl.col("opens")).then(pl.col("after") - 1).otherwise(pl.col("after"))
    df = df.with_columns(level=level, is_gpu=pl.col("opens") & (pl.col("tag") == "gpu"))
    if not df["is_gpu"].any():
        return empty(GPU_SAMPLES), problem or "no `<gpu id=...>` element found"
    is_stamp = (pl.col("tag") == "timestamp") & pl.col("value").is_not_null() & (pl.col("level") == 1)
    df = df.with_columns(
        *[
            pl.when(pl.col("opens") & (pl.col("level") == depth))
            .then(pl.col("tag"))
            .when((pl.col("opens") | pl.col("closes")) & (pl.col("level") <= depth))
            .then(pl.lit(""))
            .alias(f"sec{depth}")
            for depth in range(2, _XML_DEPTH)
        ],
        dump=(pl.col("opens") & (pl.col("tag") == "nvidia_smi_log")).cum_sum(),
        stamp=pl.when(is_stamp).then(pl.col("value").str.strip_chars()),
        bus=pl.when(pl.col("is_gpu")).then(pl.col("attrs").str.extract(r'id="([^"]*)"')),
    ).with_columns(
        pl.col("stamp").forward_fill().backward_fill().over("dump"),
        *[pl.col(f"sec{d}").forward_fill() for d in range(2, _XML_DEPTH)],
        gpu_line=pl.when(pl.col("is_gpu")).then(pl.col("line")).forward_fill().over("dump"),
        gpu=pl.col("is_gpu").cast(pl.Int32).cum_sum().over("dump") - 1,
        in_gpu=(pl.col("level") >= 2) & (pl.col("is_gpu").cast(pl.Int32).cum_sum().over("dump") > 0),
    )
    path = pl.concat_str(
        [pl.when(pl.col(f"sec{d}") != "").then(pl.col(f"sec{d}")) for d in range(2, _XML_DEPTH)] + [pl.col("tag")],
        separator="/",
        ignore_nulls=True,
    )
    values = (
        df.filter(pl.col("value").is_not_null() & pl.col("in_gpu"))
        .with_columns(field=path.replace_strict(XML_FIELDS, default=None), value=pl.col("value").str.strip_chars())
        .filter(pl.col("field").is_not_null())
        .select("dump", "gpu", "field", "value")
    )
    attached = pl.when((pl.col("tag") == "attached_gpus") & (pl.col("level") == 1)).then(pl.col("value").str.strip_chars())
    gpus = df.with_columns(attached=attached.drop_nulls().first().over("dump")).filter(pl.col("is_gpu"))
    gpus = gpus.select("dump", "gpu", "bus", "stamp", "attached", line="gpu_line")
    return _dump_samples(values, gpus, file, host, problem, InputKind.NVIDIA_SMI_XML)


def _q_samples(wide: pl.DataFrame, file: str, host: str | None, source: InputKind) -> pl.DataFrame:
    def ecc(kind: str, scope: str) -> pl.Expr:
        cols = [c for c in wide.columns if c.startswith(f"ecc_{kind}_{scope}_")]
        return _sum_or_null([_count(pl.col(c)) for c in cols])

    limit = pl.coalesce(_number(_col(wide, "limit_current")), _number(_col(wide, "limit_enforced")), _number(_col(wide, "limit_plain")))
    draw = pl.coalesce(_number(_col(wide, "power_draw")), _number(_col(wide, "power_avg")), _number(_col(wide, "power_inst")))
    out = wide.with_columns(
        host=pl.lit(host, dtype=pl.String),
        pci_bus_id=pci_bus_id(pl.col("bus")),
        uuid=_null_tokens(_col(wide, "uuid")),
        serial=_serial(_col(wide, "serial")),
        name=_null_tokens(_col(wide, "name")),
        time=line_time(pl.col("stamp").fill_null(""), 1970),
        source=pl.lit(source.value),
        temperature_c=_number(_col(wide, "temperature_c")),
        thermal_headroom_c=pl.coalesce(
            _number(_col(wide, "slowdown_temp")) - _number(_col(wide, "temperature_c")),
            _number(_col(wide, "tlimit_headroom")) - _number(_col(wide, "slowdown_tlimit")),
        ),
        power_draw_w=draw,
        power_limit_w=limit,
        sm_util_pct=_number(_col(wide, "sm_util_pct")),
        mem_util_pct=_number(_col(wide, "mem_util_pct")),
        memory_used_mib=_number(_col(wide, "memory_used_mib")),
        memory_total_mib=_number(_col(wide, "memory_total_mib")),
        sm_clock_mhz=_number(_col(wide, "sm_clock_mhz")),
        throttle_reasons=_reasons({r: _flag(_col(wide, f"reason_{r}")) for r in REASONS}),
        ecc_corrected_volatile=ecc("c", "volatile"),
        ecc_uncorrected_volatile=ecc("u", "volatile"),
        ecc_corrected_aggregate=ecc("c", "aggregate"),
        ecc_uncorrected_aggregate=ecc("u", "aggregate"),
        retired_pages=_sum_or_null([_count(_col(wide, "retired_sbe")), _count(_col(wide, "retired_dbe"))]),
        retired_pages_pending=_flag(_col(wide, "retired_pending")),
        remapped_rows_correctable=_count(_col(wide, "remapped_rows_correctable")),
        remapped_rows_uncorrectable=_count(_col(wide, "remapped_rows_uncorrectable")),
        remapped_rows_pending=_flag(_col(wide, "remapped_rows_pending")),
        remapped_rows_failure=_flag(_col(wide, "remapped_rows_failure")),
        file=pl.lit(file),
    )
    return conform(out, GPU_SAMPLES).sort("line")


# ---------------------------------------------------------------------------------------
# --query-gpu CSV

# CSV field (unit suffix removed, old names mapped to new) -> sample column
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
    problem = _binary_problem(text)
    df = _lines(text).filter(pl.col("raw").str.strip_chars() != "")
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
    names = _distinct(names)  # a repeated field keeps its first column
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
    dropped = _lines(text).filter(pl.col("raw").str.strip_chars() != "").height - df.height - (header_text is not None)
    if dropped > 0 and problem is None:
        problem = f"{dropped} line(s) with a different number of cells were skipped (truncated or mixed queries)"
    if df.is_empty():
        return empty(GPU_SAMPLES), problem or "no data rows"
    return _csv_samples(df, file, host), problem


def _csv_samples(df: pl.DataFrame, file: str, host: str | None) -> pl.DataFrame:
    prefix = "clocks_event_reasons."
    mask = _null_tokens(_col(df, prefix + "active")).str.replace(r"^0[xX]", "").str.to_integer(base=16, strict=False)
    reason_cols = {
        "hw_slowdown": "hw_slowdown",
        "hw_thermal": "hw_thermal_slowdown",
        "sw_thermal": "sw_thermal_slowdown",
        "sw_power_cap": "sw_power_cap",
        "power_brake": "hw_power_brake_slowdown",
    }
    flags = {reason: pl.coalesce(_flag(_col(df, prefix + col)), (mask & REASON_BITS[reason]) != 0) for reason, col in reason_cols.items()}
    out = df.with_columns(
        host=pl.lit(host, dtype=pl.String),
        gpu=_count(_col(df, "index")).cast(pl.Int32),
        pci_bus_id=pci_bus_id(_null_tokens(_col(df, "pci.bus_id"))),
        uuid=_null_tokens(_col(df, "uuid")),
        serial=_serial(_col(df, "serial")),
        name=_null_tokens(_col(df, "name")),
        time=line_time(_col(df, "timestamp").fill_null(""), 1970),
        source=pl.lit(InputKind.NVIDIA_SMI_CSV.value),
        temperature_c=_number(_col(df, "temperature.gpu")),
        power_draw_w=_number(_col(df, "power.draw", "power.draw.average", "power.draw.instant")),
        power_limit_w=_number(_col(df, "power.limit", "enforced.power.limit")),
        sm_util_pct=_number(_col(df, "utilization.gpu")),
        mem_util_pct=_number(_col(df, "utilization.memory")),
        memory_used_mib=_number(_col(df, "memory.used")),
        memory_total_mib=_number(_col(df, "memory.total")),
        sm_clock_mhz=_number(_col(df, "clocks.current.sm")),
        throttle_reasons=_reasons(flags),
        ecc_corrected_volatile=_count(_col(df, "ecc.errors.corrected.volatile.total")),
        ecc_uncorrected_volatile=_count(_col(df, "ecc.errors.uncorrected.volatile.total")),
        ecc_corrected_aggregate=_count(_col(df, "ecc.errors.corrected.aggregate.total")),
        ecc_uncorrected_aggregate=_count(_col(df, "ecc.errors.uncorrected.aggregate.total")),
        retired_pages=_sum_or_null(
            [_count(_col(df, "retired_pages.single_bit_ecc.count")), _count(_col(df, "retired_pages.double_bit.count"))]
        ),
        retired_pages_pending=_flag(_col(df, "retired_pages.pending")),
        remapped_rows_correctable=_count(_col(df, "remapped_rows.correctable")),
        remapped_rows_uncorrectable=_count(_col(df, "remapped_rows.uncorrectable")),
        remapped_rows_pending=_flag(_col(df, "remapped_rows.pending")),
        remapped_rows_failure=_flag(_col(df, "remapped_rows.failure")),
        file=pl.lit(file),
    )
    return conform(out, GPU_SAMPLES)


# ---------------------------------------------------------------------------------------
# dmon / pmon

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


def _distinct(names: list[str]) -> list[str]:
    """Header names made unique: a dmon units line (`#HH:MM:SS Idx W C C %`) or a CSV header
    that asks for one field twice repeats some; each repeat becomes `name#2`, `name#3`."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def _dmon_rows(text: str) -> tuple[pl.DataFrame, list[str], str | None]:
    """Data rows split on whitespace, with the column names of the `#` header above them."""
    df = _lines(text)
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
    names = _distinct([n.lower() for n in headers[0].lstrip("#").split()])
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
    date = _col(rows, "c_date")
    clock = _col(rows, "c_time")
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
    problem = _binary_problem(text)
    rows, names, read_problem = _dmon_rows(text)
    problem = problem or read_problem
    if not names or "pid" in names or rows.is_empty():
        return empty(GPU_SAMPLES), problem or ("pmon output, not dmon" if "pid" in names else "no data rows")
    metrics = {column: _number(pl.col(f"c_{name}")) for name, column in DMON_COLUMNS.items() if name in names}
    flags = {
        "power_violation": _number(_col(rows, "c_pviol")) > 0,
        "thermal_violation": _number(_col(rows, "c_tviol")) > 0,
    }
    out = rows.with_columns(
        host=pl.lit(host, dtype=pl.String),
        gpu=_count(_col(rows, "c_gpu")).cast(pl.Int32),
        time=_dmon_time(rows),
        source=pl.lit(InputKind.NVIDIA_SMI_DMON.value),
        throttle_reasons=_reasons(flags),
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
    problem = _binary_problem(text)
    rows, names, read_problem = _dmon_rows(text)
    problem = problem or read_problem
    if "pid" not in names or rows.is_empty():
        return empty(GPU_PROCESSES), problem or "no pmon rows"
    out = rows.with_columns(
        host=pl.lit(host, dtype=pl.String),
        gpu=_count(pl.col("c_gpu")).cast(pl.Int32),
        pid=_count(pl.col("c_pid")),
        type=_null_tokens(_col(rows, "c_type")),
        process=_null_tokens(_col(rows, "c_command")),
        sm_util_pct=_number(_col(rows, "c_sm")),
        time=_dmon_time(rows),
        file=pl.lit(file),
    ).filter(pl.col("pid").is_not_null())
    return conform(out, GPU_PROCESSES), problem


# ---------------------------------------------------------------------------------------
# topo -m


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
        return empty(GPU_TOPOLOGY), _binary_problem(text) or "no topology header (a tab-led line naming GPU0)"
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


# ---------------------------------------------------------------------------------------
# sniffing

KERNEL_SNIFF_CHARS = 16_384
_DMON_HEAD = re.compile(r"^#\s*(?:gpu|Date|Time)\b", re.M)
_KERNEL_LINE = re.compile(r"^(?:\[\s*\d+\.\d{6}\] |\S+: kern: \w+: \[|.{15,40} kernel: )", re.M)
_KERNEL_WORDS = re.compile(r"NVRM: |SXid \(PCI:|AER: |[Oo]ut of memory: Kill|oom-kill:")


def sniff_gpu_kind(head: str) -> str | None:
    """The InputKind of a file from its first lines, when it is a GPU or kernel source."""
    text = re.sub(ANSI, "", head.lstrip("\ufeff"))
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if "==============NVSMI LOG==============" in text[:4096]:
        return InputKind.NVIDIA_SMI_QUERY.value
    if "<nvidia_smi_log>" in text[:4096]:
        return InputKind.NVIDIA_SMI_XML.value
    if _DMON_HEAD.match(first):
        return InputKind.NVIDIA_SMI_DMON.value
    if first.startswith("\t") and "GPU0" in first:
        return InputKind.NVIDIA_SMI_TOPO.value
    if _is_csv_header(first) or re.match(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}, ", first):
        return InputKind.NVIDIA_SMI_CSV.value
    start = text[:KERNEL_SNIFF_CHARS]  # a kernel log shows itself at once; 1,024 heads must stay cheap
    if _KERNEL_WORDS.search(start) or len(_KERNEL_LINE.findall(start)) >= 3:
        return InputKind.KERNEL_LOG.value
    return None
