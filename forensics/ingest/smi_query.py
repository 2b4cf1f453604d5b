"""`nvidia-smi -q` text and `nvidia-smi -q -x` XML -> GPU_SAMPLES rows (ingest/gpu.py).

Both list every GPU of a host per dump, many dumps per file; a value is placed by its
section path, mapped per driver generation to a sample column. See ingest/gpu.py for the
assumptions shared by every nvidia-smi reader.
"""

from __future__ import annotations

import polars as pl

from forensics.ingest.gpu import (
    GPU_SAMPLES,
    REASONS,
    binary_problem,
    clean_lines,
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
    problem = binary_problem(text)
    df = clean_lines(text)
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
            fields[f"clocks_{word}true_reasons/clocks_{word}_reason_{tag}"] = f"reason_{reason}"
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
    problem = binary_problem(text)
    parts = pl.col("raw").str.extract_groups(_XML_LINE)
    df = clean_lines(text).with_columns(parts=parts).unnest("parts")
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
        return sum_or_null([leading_count(pl.col(c)) for c in cols])

    limit = pl.coalesce(
        leading_number(first_column(wide, "limit_current")),
        leading_number(first_column(wide, "limit_enforced")),
        leading_number(first_column(wide, "limit_plain")),
    )
    draw = pl.coalesce(
        leading_number(first_column(wide, "power_draw")),
        leading_number(first_column(wide, "power_avg")),
        leading_number(first_column(wide, "power_inst")),
    )
    out = wide.with_columns(
        host=pl.lit(host, dtype=pl.String),
        pci_bus_id=pci_bus_id(pl.col("bus")),
        uuid=without_null_tokens(first_column(wide, "uuid")),
        serial=serial_number(first_column(wide, "serial")),
        name=without_null_tokens(first_column(wide, "name")),
        time=line_time(pl.col("stamp").fill_null(""), 1970),
        source=pl.lit(source.value),
        temperature_c=leading_number(first_column(wide, "temperature_c")),
        thermal_headroom_c=pl.coalesce(
            leading_number(first_column(wide, "slowdown_temp")) - leading_number(first_column(wide, "temperature_c")),
            leading_number(first_column(wide, "tlimit_headroom")) - leading_number(first_column(wide, "slowdown_tlimit")),
        ),
        power_draw_w=draw,
        power_limit_w=limit,
        sm_util_pct=leading_number(first_column(wide, "sm_util_pct")),
        mem_util_pct=leading_number(first_column(wide, "mem_util_pct")),
        memory_used_mib=leading_number(first_column(wide, "memory_used_mib")),
        memory_total_mib=leading_number(first_column(wide, "memory_total_mib")),
        sm_clock_mhz=leading_number(first_column(wide, "sm_clock_mhz")),
        throttle_reasons=true_reasons({r: flag(first_column(wide, f"reason_{r}")) for r in REASONS}),
        ecc_corrected_volatile=ecc("c", "volatile"),
        ecc_uncorrected_volatile=ecc("u", "volatile"),
        ecc_corrected_aggregate=ecc("c", "aggregate"),
        ecc_uncorrected_aggregate=ecc("u", "aggregate"),
        retired_pages=sum_or_null([leading_count(first_column(wide, "retired_sbe")), leading_count(first_column(wide, "retired_dbe"))]),
        retired_pages_pending=flag(first_column(wide, "retired_pending")),
        remapped_rows_correctable=leading_count(first_column(wide, "remapped_rows_correctable")),
        remapped_rows_uncorrectable=leading_count(first_column(wide, "remapped_rows_uncorrectable")),
        remapped_rows_pending=flag(first_column(wide, "remapped_rows_pending")),
        remapped_rows_failure=flag(first_column(wide, "remapped_rows_failure")),
        file=pl.lit(file),
    )
    return conform(out, GPU_SAMPLES).sort("line")
