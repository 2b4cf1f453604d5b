"""Kernel logs (dmesg, dmesg -T, journalctl -k, kern.log/syslog, Talos kmsg) -> GPU events.

Keeps the lines that speak about GPUs or the host's health: NVRM Xid and NVSwitch SXid
lines, "GPU has fallen off the bus", PCIe AER errors and the OOM killer (formats.md 5.3,
7.5). Each event carries its file/line and verbatim text for citation, the normalized PCI
id, and for Xids the catalog's mnemonic, meaning, fatal flag and severity.

Times: dmesg's `[secs.micro]` is time since boot; it becomes wall time when the boot
time is known (`boot_time=`, a `btime N` line from /proc/stat in the same text, or lines
carrying both clocks). Otherwise the time stays null, `uptime_s` and `line` keep the
order, and `attach_boot_times` can align it later with a `dmesg -T` companion file.
"""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl

from forensics.ingest.gpu import binary_problem, clean_lines, pci_bus_id
from forensics.ingest.timestamps import infer_year, line_time
from forensics.schema import TIME, conform, empty
from forensics.xid import xid_frame

GPU_EVENTS: dict[str, pl.DataType] = {
    "host": pl.String,
    "time": TIME,
    "uptime_s": pl.Float64,  # dmesg seconds since boot, when printed
    "file": pl.String,
    "line": pl.Int64,
    "text": pl.String,  # the whole line, verbatim
    "message": pl.String,  # the text after the time/host prefix
    "kind": pl.String,  # xid | sxid | fell_off_bus | pcie_aer | host_oom
    "xid": pl.Int32,  # Xid or SXid code
    "mnemonic": pl.String,
    "meaning": pl.String,
    "fatal": pl.Boolean,
    "severity": pl.String,
    "category": pl.String,
    "role": pl.String,
    "pid": pl.Int64,
    "process": pl.String,
    "pci_bus_id": pl.String,
    "uuid": pl.String,
}

PCI = r"(?:PCI:)?[0-9a-fA-F]{0,8}:?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
XID = r"NVRM: Xid \((?P<pci>" + PCI + r")\): (?P<code>\d+)(?:, pid=(?P<pid>'?<unknown>'?|\d+))?(?:, name=(?P<name>[^,]*))?"
SXID = r"SXid \((?P<pci>" + PCI + r")\): (?P<code>\d+)(?:, (?P<sev>Non-fatal|Fatal))?"
FELL = r"NVRM: (?:GPU|The NVIDIA GPU) (?P<pci>" + PCI + r")\b.*fallen off the bus"
GPU_AT = r"NVRM: GPU at (?P<pci>" + PCI + r"): (?P<uuid>GPU-[0-9a-fA-F-]+)"
AER = (
    r"(?:AER: (?P<sev1>(?:Multiple )?(?:Corrected|Uncorrected \((?:Non-)?Fatal\))) error received: (?:id=)?(?P<pci1>[0-9a-fA-F:.]+)"
    r"|(?P<pci2>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: severity=(?P<sev2>[^,]+))"
)
OOM = r"(?:[Oo]ut of memory: Kill(?:ed)? process|^Killed process) (?P<pid>\d+) \((?P<name>[^)]*)\)"
PREFILTER = r"NVRM: |SXid \(|AER: |PCIe Bus Error|ut of memory: Kill|Killed process|^btime \d+"

# The prefix before the kernel message, in the forms of formats.md 5.3 / 7.5.
PREFIX = (
    r"^(?:(?P<talos_host>\S+): kern: \w+: \[[^\]]+\]: "
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}\] "
    r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[,.]?\d*(?:Z|[+-]\d{2}:?\d{2})? (?:(?P<iso_host>\S+) kernel: )?"
    r"|[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} (?:(?P<sys_host>\S+) )?kernel: )?"
    r"(?:\[\s*(?P<uptime>\d+\.\d+)\] )?"
)


def parse_kernel_log(
    text: str,
    file: str,
    host_hint: str | None = None,
    boot_time: datetime | None = None,
    default_year: int | None = None,
) -> tuple[pl.DataFrame, str | None]:
    """Kernel log text -> GPU_EVENTS rows (one per GPU/PCIe/OOM line) and a problem or None.

    `host_hint` names the host when the lines do not (dmesg never does); `default_year`
    dates syslog lines, which carry no year (otherwise taken from the text's own full
    dates; without any, those lines keep a null time rather than an invented year).
    """
    problem = binary_problem(text)
    lines = clean_lines(text).rename({"raw": "text"})
    hits = lines.filter(pl.col("text").str.contains(PREFILTER))
    boot = boot_time or _btime(hits)
    hits = hits.filter(~pl.col("text").str.contains(r"^btime \d+"))
    if hits.is_empty():
        return empty(GPU_EVENTS), problem
    year = default_year or infer_year(lines["text"], 0)
    prefix = pl.col("text").str.extract_groups(PREFIX)
    events = hits.with_columns(
        message=pl.col("text").str.replace(PREFIX, ""),
        host=pl.coalesce(
            prefix.struct.field("talos_host"),
            prefix.struct.field("sys_host"),
            prefix.struct.field("iso_host"),
            pl.lit(host_hint, dtype=pl.String),
        ),
        uptime_s=prefix.struct.field("uptime").cast(pl.Float64, strict=False),
        time=line_time(pl.col("text"), year or 1904),
    ).with_columns(
        # 1904 marks a year we could not know: leave those times null
        time=pl.when(pl.col("time").dt.year() != 1904).then(pl.col("time"))
    )
    events = _classify(events)
    events = _attach_uuid(events, hits)
    events = events.with_columns(file=pl.lit(file)).filter(pl.col("kind").is_not_null())
    events = conform(events, GPU_EVENTS)
    if boot is not None:
        events = _apply_boot(events, pl.lit(boot, dtype=TIME))
    else:
        events = attach_boot_times(events)
    return events.sort("line"), problem


def _classify(events: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("message")
    xid = msg.str.extract_groups(XID)
    sxid = msg.str.extract_groups(SXID)
    fell = msg.str.extract_groups(FELL)
    aer = msg.str.extract_groups(AER)
    oom = msg.str.extract_groups(OOM)
    aer_sev = pl.coalesce(aer.struct.field("sev1"), aer.struct.field("sev2"))
    aer_pci = pl.coalesce(aer.struct.field("pci1"), aer.struct.field("pci2"))
    is_xid = xid.struct.field("code").is_not_null()
    is_sxid = sxid.struct.field("code").is_not_null()
    is_fell = fell.struct.field("pci").is_not_null() & ~is_xid
    is_aer = aer_sev.is_not_null()
    is_oom = oom.struct.field("pid").is_not_null()
    kind = (
        pl.when(is_xid)
        .then(pl.lit("xid"))
        .when(is_sxid)
        .then(pl.lit("sxid"))
        .when(is_fell)
        .then(pl.lit("fell_off_bus"))
        .when(is_aer)
        .then(pl.lit("pcie_aer"))
        .when(is_oom)
        .then(pl.lit("host_oom"))
    )
    pid_text = pl.coalesce(pl.when(is_xid).then(xid.struct.field("pid")), pl.when(is_oom).then(oom.struct.field("pid")))
    aer_fatal = aer_sev.str.contains(r"\(Fatal\)")
    out = events.with_columns(
        kind=kind,
        xid=pl.coalesce(xid.struct.field("code"), sxid.struct.field("code")).cast(pl.Int32, strict=False),
        pid=pid_text.cast(pl.Int64, strict=False),
        process=pl.coalesce(pl.when(is_xid).then(xid.struct.field("name")), pl.when(is_oom).then(oom.struct.field("name")))
        .str.strip_chars()
        .replace("<unknown>", None),
        pci_bus_id=pci_bus_id(
            pl.coalesce(
                pl.when(is_xid).then(xid.struct.field("pci")),
                pl.when(is_sxid).then(sxid.struct.field("pci")),
                pl.when(is_fell).then(fell.struct.field("pci")),
                pl.when(is_aer & aer_pci.str.contains(":")).then(aer_pci),
            )
        ),
        sxid_fatal=sxid.struct.field("sev") == "Fatal",
        aer_fatal=aer_fatal,
        aer_uncorrected=aer_sev.str.contains("Uncorrected"),
    )
    catalog = xid_frame().select("xid", "mnemonic", "meaning", "fatal", "severity", "category", "role")
    out = out.join(catalog, on="xid", how="left").with_columns(
        [
            pl.when(pl.col("kind") == "xid").then(pl.col(c)).alias(c)
            for c in ("mnemonic", "meaning", "fatal", "severity", "category", "role")
        ]
    )
    kind_col = pl.col("kind")
    return out.with_columns(
        mnemonic=pl.when(kind_col == "xid")
        .then(pl.col("mnemonic"))
        .when(kind_col == "fell_off_bus")
        .then(pl.lit("GPU_HAS_FALLEN_OFF_THE_BUS"))
        .when(kind_col == "sxid")
        .then(pl.lit("NVSWITCH_SXID"))
        .when(kind_col == "pcie_aer")
        .then(pl.lit("PCIE_AER"))
        .when(kind_col == "host_oom")
        .then(pl.lit("OOM_KILL")),
        meaning=pl.when(kind_col == "xid")
        .then(pl.col("meaning").fill_null("Xid code not in the catalog"))
        .when(kind_col == "fell_off_bus")
        .then(pl.lit("GPU has fallen off the bus"))
        .when(kind_col == "sxid")
        .then(pl.lit("NVSwitch error reported by the NVSwitch driver"))
        .when(kind_col == "pcie_aer")
        .then(pl.lit("PCIe Advanced Error Reporting"))
        .when(kind_col == "host_oom")
        .then(pl.lit("the kernel OOM killer killed a process")),
        fatal=pl.when(kind_col == "xid")
        .then(pl.col("fatal"))
        .when(kind_col == "sxid")
        .then(pl.col("sxid_fatal").fill_null(False))
        .when(kind_col == "pcie_aer")
        .then(pl.col("aer_fatal"))
        .when(kind_col.is_in(["fell_off_bus", "host_oom"]))
        .then(True),
        severity=pl.when(kind_col == "xid")
        .then(pl.col("severity").fill_null("warning"))
        .when(kind_col == "sxid")
        .then(pl.when(pl.col("sxid_fatal")).then(pl.lit("critical")).otherwise(pl.lit("warning")))
        .when(kind_col == "pcie_aer")
        .then(
            pl.when(pl.col("aer_fatal"))
            .then(pl.lit("critical"))
            .when(pl.col("aer_uncorrected"))
            .then(pl.lit("error"))
            .otherwise(pl.lit("warning"))
        )
        .when(kind_col.is_in(["fell_off_bus", "host_oom"]))
        .then(pl.lit("critical")),
        category=pl.when(kind_col == "xid")
        .then(pl.col("category").fill_null("HARDWARE"))
        .when(kind_col == "host_oom")
        .then(pl.lit("HOST_OOM"))
        .when(kind_col.is_not_null())
        .then(pl.lit("HARDWARE")),
        role=pl.when(kind_col == "xid")
        .then(pl.col("role").fill_null("symptom"))
        .when(kind_col.is_in(["fell_off_bus", "host_oom"]))
        .then(pl.lit("initiating"))
        .when(kind_col == "sxid")
        .then(pl.when(pl.col("sxid_fatal")).then(pl.lit("initiating")).otherwise(pl.lit("symptom")))
        .when(kind_col == "pcie_aer")
        .then(pl.when(pl.col("aer_uncorrected")).then(pl.lit("initiating")).otherwise(pl.lit("symptom"))),
    )


def _attach_uuid(events: pl.DataFrame, hits: pl.DataFrame) -> pl.DataFrame:
    """GPU UUIDs from `NVRM: GPU at PCI:<addr>: GPU-<uuid>` lines, joined on the PCI id."""
    at = hits.select(pl.col("text").str.extract_groups(GPU_AT).alias("m")).unnest("m").drop_nulls()
    if at.is_empty():
        return events.with_columns(uuid=pl.lit(None, dtype=pl.String))
    ids = at.select(pci_bus_id=pci_bus_id(pl.col("pci")), uuid=pl.col("uuid")).unique("pci_bus_id", keep="last")
    return events.join(ids, on="pci_bus_id", how="left")


MAX_EPOCH_S = 7_258_118_400  # 2200-01-01, the timestamps' upper bound


def _btime(hits: pl.DataFrame) -> datetime | None:
    """Boot time from a `btime <epoch>` line (/proc/stat) in the same text."""
    found = hits["text"].str.extract(r"^btime (\d+)\s*$").drop_nulls()
    if found.is_empty():
        return None
    seconds = int(found[0])
    if not 0 <= seconds < MAX_EPOCH_S:
        return None  # no real boot time: a corrupt or crafted line
    return datetime.fromtimestamp(seconds, tz=UTC)


def _apply_boot(events: pl.DataFrame, boot: pl.Expr) -> pl.DataFrame:
    since_boot = pl.duration(microseconds=(pl.col("uptime_s") * 1e6).round().cast(pl.Int64, strict=False))
    return events.with_columns(time=pl.coalesce(pl.col("time"), boot + since_boot).cast(TIME))


def attach_boot_times(events: pl.DataFrame) -> pl.DataFrame:
    """Fill null times from uptime where a host's boot time can be derived from its events.

    Notes:
        Per host, the boot time is the median of `time - uptime_s` over rows that carry
        both clocks (syslog lines with a dmesg stamp inside), or over pairs of rows with
        the same message where one has only uptime and the other only wall time (a raw
        `dmesg` next to a `dmesg -T` of the same boot). Works on events concatenated
        from several files of one incident.
    """
    if events.is_empty() or events["uptime_s"].is_null().all():
        return events
    with_both = events.filter(pl.col("time").is_not_null() & pl.col("uptime_s").is_not_null())
    walls = events.filter(pl.col("time").is_not_null() & pl.col("uptime_s").is_null()).select("host", "message", "time")
    only_up = events.filter(pl.col("time").is_null() & pl.col("uptime_s").is_not_null()).select("host", "message", "uptime_s")
    paired = only_up.join(walls, on=["host", "message"], how="inner", nulls_equal=True)
    offsets = pl.concat([with_both.select("host", "time", "uptime_s"), paired.select("host", "time", "uptime_s")])
    if offsets.is_empty():
        return events
    boots = offsets.group_by("host").agg(
        boot=(pl.col("time").dt.epoch("us") - (pl.col("uptime_s") * 1e6).round().cast(pl.Int64, strict=False)).median().cast(pl.Int64)
    )
    joined = events.join(boots, on="host", how="left", nulls_equal=True, maintain_order="left")
    since_boot = (pl.col("uptime_s") * 1e6).round().cast(pl.Int64, strict=False)
    return joined.with_columns(
        time=pl.coalesce(pl.col("time"), (pl.col("boot") + since_boot).cast(pl.Datetime("us")).dt.replace_time_zone("UTC"))
    ).drop("boot")
