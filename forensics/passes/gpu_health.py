"""GPU health: from nvidia-smi samples and kernel events to the failing GPU, host and rank.

Input frames come from ingest/gpu.py (GPU_SAMPLES) and ingest/kernel_log.py
(GPU_EVENTS); optional context: the NCCL topology (host, rank, cuda_dev, pci_bus_id,
pid, nranks, comm_id), rank pids (rank, pid[, host][, local_rank]) and the METRICS
frame (step times). Output: FINDINGS rows plus a `gpu_ranks` table saying which rank
ran on which GPU and how that was established.

Notes:
    Rank mapping, strongest first: the NCCL init line's busId (exact), the pid printed
    in an Xid line matched to a rank's pid (exact), then the local-rank convention
    (CUDA device index == local rank, ranks of a host ordered), which is an assumption
    and says so in `captures.rank_mapping`.
    Thresholds: throttling counts when a clock-event reason is active in a sample; its
    duration is the sum of the intervals to the next sample. SW power capping is
    normal under load and is reported only when it costs >= 10% SM clock against the
    host's uncapped samples. A throttled GPU explains a straggler when its rank's
    median step time inside the throttle window is >= 1.1x the other ranks' median
    in the same window. Utilization imbalance: a GPU whose mean SM utilization is
    below half the host median while that median is >= 50%.
    Heat: a GPU with no headroom left before its own slowdown threshold (nvidia-smi -q)
    is hot enough to throttle (error); where the threshold is not printed, a GPU at
    HOT_TEMP_C or above is a warning (data-center GPUs slow down near 85-90 °C).
    Corrected ECC errors that climb between samples of one GPU are a warning: the
    memory is being repaired as it goes, and an uncorrectable error often follows.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from forensics.incident import PassResult
from forensics.ingest.gpu import GPU_SAMPLES, pci_bus_id
from forensics.ingest.kernel_log import GPU_EVENTS
from forensics.schema import FINDINGS, TIME, Category, Role, Severity, conform, empty
from forensics.xid import xid_catalog

GPU_RANKS: dict[str, pl.DataType] = {
    "host": pl.String,
    "gpu": pl.Int32,
    "pci_bus_id": pl.String,
    "rank": pl.Int32,
    "rank_mapping": pl.String,  # nccl_busid | xid_pid | assumed_local_rank
}

THROTTLE_CLASSES = {
    # class -> (reasons, pattern, title, severity, role)
    "thermal": (
        {"hw_thermal", "sw_thermal", "thermal_violation"},
        "GPU-THERMAL-THROTTLE",
        "GPU clocks throttled for temperature",
        Severity.ERROR,
        Role.INITIATING,
    ),
    "power_brake": ({"power_brake"}, "GPU-POWER-BRAKE", "GPU clocks cut by the external power brake", Severity.ERROR, Role.INITIATING),
    "hw_slowdown": ({"hw_slowdown"}, "GPU-HW-SLOWDOWN", "GPU hardware slowdown active", Severity.ERROR, Role.INITIATING),
    "power_cap": (
        {"sw_power_cap", "power_violation"},
        "GPU-POWER-CAP",
        "GPU clocks held down by the power cap",
        Severity.WARNING,
        Role.SYMPTOM,
    ),
}
POWER_CAP_CLOCK_DEFICIT = 0.10
HOT_TEMP_C = 85.0
BUSY_UTIL_PCT = 90.0  # a GPU this busy draws most of its power limit on training work
LOW_POWER_SHARE = 0.5  # ... so a busy GPU under half its limit,
PEER_POWER_SHARE = 0.6  # and under 60% of what its host's other busy GPUs draw, is not doing the work they do
MIN_BUSY_SAMPLES = 3
STRAGGLER_SLOWDOWN = 1.1


def analyze_gpu_health(
    samples: pl.DataFrame | None,
    events: pl.DataFrame | None,
    nccl_topology: pl.DataFrame | None = None,
    rank_pids: pl.DataFrame | None = None,
    metrics: pl.DataFrame | None = None,
) -> PassResult:
    """Findings on fatal Xids, ECC, row remapping, throttling, missing GPUs and imbalance."""
    samples = conform(samples, GPU_SAMPLES) if samples is not None else empty(GPU_SAMPLES)
    events = conform(events, GPU_EVENTS) if events is not None else empty(GPU_EVENTS)
    ranks = _gpu_ranks(samples, events, nccl_topology, rank_pids)
    rows: list[dict[str, Any]] = []
    rows += _event_findings(events, samples)
    rows += _memory_findings(samples)
    throttles = _throttle_findings(samples)
    rows += throttles
    rows += _heat_findings(samples)
    rows += _missing_gpu_findings(samples)
    rows += _imbalance_findings(samples)
    rows += _low_power_findings(samples)
    findings = _frame(rows)
    findings = _with_ranks(findings, ranks, rank_pids)
    findings = pl.concat([findings, _straggler_links(findings, metrics)])
    return PassResult(findings=findings.sort("time", "file", "line", nulls_last=True), tables={"gpu_ranks": ranks})


# ---------------------------------------------------------------------------------------
# which rank ran on which GPU


def _gpu_ranks(samples: pl.DataFrame, events: pl.DataFrame, topology: pl.DataFrame | None, rank_pids: pl.DataFrame | None) -> pl.DataFrame:
    gpus = pl.concat(
        [
            samples.select("host", "gpu", "pci_bus_id"),
            events.filter(pl.col("pci_bus_id").is_not_null()).select("host", pl.lit(None, pl.Int32).alias("gpu"), "pci_bus_id"),
        ]
    ).unique(maintain_order=True)
    known = gpus.filter(pl.col("gpu").is_not_null())
    gpus = gpus.join(
        known.select("host", "pci_bus_id", gpu_known="gpu").unique(["host", "pci_bus_id"], keep="first"),
        on=["host", "pci_bus_id"],
        how="left",
        nulls_equal=True,
    )
    gpus = (
        gpus.with_columns(gpu=pl.coalesce("gpu", "gpu_known")).drop("gpu_known").unique(["host", "pci_bus_id", "gpu"], maintain_order=True)
    )
    mapped = empty(GPU_RANKS)
    if topology is not None and not topology.is_empty() and "pci_bus_id" in topology.columns:
        topo = (
            topology.with_columns(
                pci_bus_id=pci_bus_id(pl.col("pci_bus_id").cast(pl.String)),
                nranks=pl.col("nranks") if "nranks" in topology.columns else pl.lit(0),
            )
            .sort(["nranks", "rank"], descending=[True, False])
            .unique(["host", "pci_bus_id"], keep="first", maintain_order=True)
        )
        gpu_idx = pl.col("cuda_dev") if "cuda_dev" in topo.columns else pl.lit(None)
        exact = topo.select("host", "pci_bus_id", gpu=gpu_idx.cast(pl.Int32), rank=pl.col("rank").cast(pl.Int32))
        mapped = pl.concat([mapped, conform(exact.with_columns(rank_mapping=pl.lit("nccl_busid")), GPU_RANKS)])
        # a GPU seen without host (dmesg without host hint) still maps when its bus id is unique
        unique_pci = exact.filter(pl.col("pci_bus_id").is_unique())
        hostless = gpus.filter(pl.col("host").is_null()).select("pci_bus_id").join(unique_pci, on="pci_bus_id")
        mapped = pl.concat(
            [mapped, conform(hostless.with_columns(host=pl.lit(None, pl.String), rank_mapping=pl.lit("nccl_busid")), GPU_RANKS)]
        )
    assumed = _local_rank_convention(gpus, rank_pids)
    mapped = pl.concat([mapped, assumed])
    # GPUs named by samples/events keep their index from the samples
    # left_right keeps `mapped` in its order of preference (bus id before the local-rank guess)
    out = gpus.join(
        mapped.rename({"gpu": "gpu_mapped"}), on=["host", "pci_bus_id"], how="left", nulls_equal=True, maintain_order="left_right"
    )
    out = out.with_columns(gpu=pl.coalesce("gpu", "gpu_mapped"))
    extra = mapped.join(gpus, on=["host", "pci_bus_id"], how="anti", nulls_equal=True, maintain_order="left")
    return (
        conform(pl.concat([conform(out, GPU_RANKS), extra]), GPU_RANKS)
        .unique(["host", "pci_bus_id"], keep="first", maintain_order=True)
        .sort("host", "gpu", "pci_bus_id", nulls_last=True)
    )


def _local_rank_convention(gpus: pl.DataFrame, rank_pids: pl.DataFrame | None) -> pl.DataFrame:
    """CUDA device index == local rank, ranks of each host in order: an assumption, labelled."""
    if rank_pids is None or rank_pids.is_empty() or "host" not in rank_pids.columns:
        return empty(GPU_RANKS)
    local = pl.col("local_rank") if "local_rank" in rank_pids.columns else pl.col("rank").rank("dense").over("host") - 1
    per_host = rank_pids.select("host", "rank").unique().with_columns(gpu=local.cast(pl.Int32))
    joined = gpus.filter(pl.col("gpu").is_not_null()).join(per_host, on=["host", "gpu"], how="inner")
    return conform(joined.with_columns(rank_mapping=pl.lit("assumed_local_rank")), GPU_RANKS)


def _with_ranks(findings: pl.DataFrame, ranks: pl.DataFrame, rank_pids: pl.DataFrame | None) -> pl.DataFrame:
    """Fill rank (and GPU index) on findings from the GPU map, else from the Xid line's pid."""
    if findings.is_empty():
        return findings
    by_gpu = {(r["host"], r["pci_bus_id"]): r for r in ranks.filter(pl.col("rank").is_not_null()).iter_rows(named=True)}
    gpu_index = {(r["host"], r["pci_bus_id"]): r["gpu"] for r in ranks.iter_rows(named=True) if r["gpu"] is not None}
    by_pid: dict[int, int] = {}
    if rank_pids is not None and {"pid", "rank"} <= set(rank_pids.columns):
        by_pid = {int(p): int(r) for p, r in rank_pids.select("pid", "rank").drop_nulls().iter_rows()}
    rows = []
    for row in findings.iter_rows(named=True):
        key = (row["host"], row["pci_bus_id"])
        caps = json.loads(row["captures"] or "{}")
        if row["gpu"] is None:
            row["gpu"] = gpu_index.get(key)
        if row["rank"] is None and key in by_gpu:
            row["rank"], caps["rank_mapping"] = by_gpu[key]["rank"], by_gpu[key]["rank_mapping"]
        elif row["rank"] is None and caps.get("pid") in by_pid:
            row["rank"], caps["rank_mapping"] = by_pid[caps["pid"]], "xid_pid"
        if caps.get("rank_mapping") == "assumed_local_rank":
            caps["assumption"] = "CUDA device index == local rank (no NCCL busId or pid evidence)"
        row["captures"] = json.dumps(caps, default=str, sort_keys=True)
        rows.append(row)
    return _frame(rows)


# ---------------------------------------------------------------------------------------
# findings


def _finding(pattern: str, title: str, category: str, severity: str, role: str, row: dict[str, Any], **captures: Any) -> dict[str, Any]:
    return {
        "pattern": pattern,
        "title": title,
        "category": category,
        "severity": severity,
        "role": role,
        "file": row.get("file"),
        "line": row.get("line"),
        "rank": None,
        "host": row.get("host"),
        "time": row.get("time"),
        "text": row.get("text"),
        "gpu": row.get("gpu"),
        "pci_bus_id": row.get("pci_bus_id"),
        "captures": json.dumps({k: v for k, v in captures.items() if v is not None}, default=str, sort_keys=True),
    }


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    if not rows:
        return empty(FINDINGS)
    schema = {**FINDINGS, "time": TIME}
    return pl.DataFrame(rows, schema=schema)


def _event_findings(events: pl.DataFrame, samples: pl.DataFrame) -> list[dict[str, Any]]:
    """One finding per (host, GPU/device, kind, code): the first line, with the count."""
    if events.is_empty():
        return []
    xid79 = events.filter((pl.col("kind") == "xid") & (pl.col("xid") == 79)).select("host", "pci_bus_id").unique()
    events = events.join(xid79.with_columns(has79=pl.lit(True)), on=["host", "pci_bus_id"], how="left", nulls_equal=True)
    events = events.filter(~((pl.col("kind") == "fell_off_bus") & pl.col("has79").fill_null(False)))
    key = ["host", "kind", "xid", "pci_bus_id", pl.when(pl.col("kind") == "host_oom").then(pl.col("pid")).alias("oom_pid")]
    firsts = (
        events.sort("time", "line", nulls_last=True)
        .group_by(key, maintain_order=True)
        .agg(pl.all().first(), count=pl.len(), last_time=pl.col("time").max())
    )
    rows = []
    catalog = xid_catalog()
    for ev in firsts.iter_rows(named=True):
        kind, code = ev["kind"], ev["xid"]
        known = catalog.get(code) if kind == "xid" and code is not None else None
        if kind == "xid":
            pattern, title = f"GPU-XID{code}", f"Xid {code}: {ev['meaning']}"
        elif kind == "sxid":
            pattern, title = "GPU-SXID", f"NVSwitch SXid {code}"
        elif kind == "fell_off_bus":
            pattern, title = "GPU-FELL-OFF-BUS", "GPU has fallen off the bus"
        elif kind == "pcie_aer":
            pattern, title = "PCIE-AER", "PCIe AER error"
        else:
            pattern, title = "KERN-HOST-OOM", f"Kernel OOM killer killed {ev['process']} (pid {ev['pid']})"
        rows.append(
            _finding(
                pattern,
                title,
                ev["category"] or Category.HARDWARE,
                ev["severity"] or Severity.WARNING,
                ev["role"] or Role.SYMPTOM,
                ev,
                xid=code,
                mnemonic=ev["mnemonic"],
                fatal=ev["fatal"],
                count=ev["count"],
                last_time=ev["last_time"],
                pid=ev["pid"],
                process=ev["process"],
                uuid=ev["uuid"],
                nvidia_action=known.immediate if known else None,
                on_training=known.training if known else None,
            )
        )
    return rows


def _memory_findings(samples: pl.DataFrame) -> list[dict[str, Any]]:
    """Uncorrectable ECC, row remapping and page retirement state, per GPU."""
    if samples.is_empty():
        return []
    key = ["host", "pci_bus_id", "gpu"]
    rows = []
    checks = [
        (
            pl.col("ecc_uncorrected_volatile") > 0,
            "GPU-ECC-UNCORRECTABLE",
            "Uncorrectable ECC errors since the last driver load",
            Severity.CRITICAL,
            Role.INITIATING,
            "ecc_uncorrected_volatile",
        ),
        (
            pl.col("remapped_rows_failure").fill_null(False),
            "GPU-ROW-REMAP-FAILURE",
            "Row remapping failed: memory cannot be repaired",
            Severity.CRITICAL,
            Role.INITIATING,
            "remapped_rows_uncorrectable",
        ),
        (
            pl.col("remapped_rows_pending").fill_null(False),
            "GPU-ROW-REMAP-PENDING",
            "Row remap pending: reset the GPU to activate it",
            Severity.ERROR,
            Role.SYMPTOM,
            "remapped_rows_uncorrectable",
        ),
        (
            pl.col("retired_pages_pending").fill_null(False),
            "GPU-PAGE-RETIREMENT-PENDING",
            "Page retirement pending: reset the GPU to retire the page",
            Severity.ERROR,
            Role.SYMPTOM,
            "retired_pages",
        ),
    ]
    ordered = samples.sort("time", "line", nulls_last=True)
    for condition, pattern, title, severity, role, value in checks:
        hits = ordered.filter(condition).group_by(key, maintain_order=True).agg(pl.all().first(), samples=pl.len())
        for row in hits.iter_rows(named=True):
            rows.append(
                _finding(pattern, title, Category.HARDWARE, severity, role, _sample_row(row), value=row[value], samples=row["samples"])
            )
    # counts that rose while we watched: corrected errors (a warning) and lifetime uncorrectable ones
    climbing = [
        ("ecc_corrected_volatile", "GPU-ECC-CORRECTED-RISING", "Corrected ECC errors climbing during the run", Severity.WARNING, Role.SYMPTOM),
        ("ecc_uncorrected_aggregate", "GPU-ECC-UNCORRECTABLE-NEW", "Lifetime uncorrectable ECC count increased during the run", Severity.CRITICAL, Role.INITIATING),
    ]  # fmt: skip
    for column, pattern, title, severity, role in climbing:
        rose = (
            ordered.filter(pl.col(column).is_not_null())
            .group_by(key, maintain_order=True)
            .agg(pl.all().last(), first=pl.col(column).first())
            .filter(pl.col(column) > pl.col("first"))
        )
        rows += [
            _finding(pattern, title, Category.HARDWARE, severity, role, _sample_row(row), before=row["first"], after=row[column])
            for row in rose.iter_rows(named=True)
        ]
    return rows


def _sample_row(row: dict[str, Any]) -> dict[str, Any]:
    gpu = "?" if row.get("gpu") is None else row["gpu"]
    return {**row, "text": f"{row.get('source')} sample: GPU {gpu} {row.get('pci_bus_id') or ''}".strip()}


def _throttle_findings(samples: pl.DataFrame) -> list[dict[str, Any]]:
    """Per GPU and throttle class: how long, how many samples, what it cost in SM clock."""
    if samples.is_empty() or samples["throttle_reasons"].list.len().sum() == 0:
        return []
    key = ["host", "pci_bus_id", "gpu"]
    ordered = (
        samples.sort([*key, "time", "line"], nulls_last=True)
        .with_columns(
            dt_s=(pl.col("time").shift(-1).over(key) - pl.col("time")).dt.total_microseconds() / 1e6,
        )
        .with_columns(dt_s=pl.col("dt_s").fill_null(pl.col("dt_s").median().over(key)))
    )
    rows = []
    for cls, (reasons, pattern, title, severity, role) in THROTTLE_CLASSES.items():
        active = pl.col("throttle_reasons").list.eval(pl.element().is_in(list(reasons))).list.any()
        if cls == "hw_slowdown":  # only when no more specific reason explains the slowdown
            others = THROTTLE_CLASSES["thermal"][0] | THROTTLE_CLASSES["power_brake"][0]
            active = active & ~pl.col("throttle_reasons").list.eval(pl.element().is_in(list(others))).list.any()
        flagged = ordered.with_columns(active=active.fill_null(False))
        host_clock = flagged.filter(~pl.col("active")).group_by("host").agg(clock_ok=pl.col("sm_clock_mhz").median())
        stats = (
            flagged.filter(pl.col("active"))
            .group_by(key, maintain_order=True)
            .agg(
                pl.all().first(),
                samples=pl.len(),
                seconds=pl.col("dt_s").sum(),
                end=(pl.col("time") + pl.duration(microseconds=(pl.col("dt_s").fill_null(0) * 1e6).cast(pl.Int64))).max(),
                clock_min=pl.col("sm_clock_mhz").min(),
                clock_mean=pl.col("sm_clock_mhz").mean(),
                temp_max=pl.col("temperature_c").max(),
                reasons=pl.col("throttle_reasons").list.explode(keep_nulls=False, empty_as_null=False).unique().sort(),
            )
            .join(host_clock, on="host", how="left", nulls_equal=True)
        )
        for row in stats.iter_rows(named=True):
            deficit = None
            if row["clock_ok"] and row["clock_mean"] is not None:
                deficit = round(1 - row["clock_mean"] / row["clock_ok"], 3)
            if cls == "power_cap" and (deficit is None or deficit < POWER_CAP_CLOCK_DEFICIT):
                continue
            rows.append(
                _finding(
                    pattern,
                    title,
                    Category.HARDWARE,
                    severity,
                    role,
                    _sample_row(row),
                    throttle=cls,
                    reasons=row["reasons"],
                    samples=row["samples"],
                    seconds=None if row["seconds"] is None else round(row["seconds"], 3),
                    start=row["time"],
                    end=row["end"],
                    sm_clock_min_mhz=row["clock_min"],
                    sm_clock_unthrottled_mhz=row["clock_ok"],
                    clock_deficit=deficit,
                    temperature_max_c=row["temp_max"],
                )
            )
    return rows


def _heat_findings(samples: pl.DataFrame) -> list[dict[str, Any]]:
    """Per GPU, its first sample with no thermal headroom left, else its first at HOT_TEMP_C or more."""
    key = ["host", "pci_bus_id", "gpu"]
    ordered = samples.sort("time", "line", nulls_last=True)
    no_headroom = pl.col("thermal_headroom_c") <= 0
    checks = [
        (no_headroom, "GPU-AT-SLOWDOWN-TEMP", "GPU at its own slowdown temperature", Severity.ERROR, Role.INITIATING),
        (
            pl.col("thermal_headroom_c").is_null() & (pl.col("temperature_c") >= HOT_TEMP_C),
            "GPU-HOT",
            "GPU running hot",
            Severity.WARNING,
            Role.SYMPTOM,
        ),
    ]
    rows = []
    for condition, pattern, title, severity, role in checks:
        hits = ordered.filter(condition).group_by(key, maintain_order=True).agg(pl.all().first(), samples=pl.len())
        rows += [
            _finding(
                pattern,
                f"{title} ({row['temperature_c']:g} °C)" if row["temperature_c"] is not None else title,
                Category.HARDWARE,
                severity,
                role,
                _sample_row(row),
                temperature_c=row["temperature_c"],
                headroom_c=row["thermal_headroom_c"],
                samples=row["samples"],
            )  # fmt: skip
            for row in hits.iter_rows(named=True)
        ]
    return rows


def _missing_gpu_findings(samples: pl.DataFrame) -> list[dict[str, Any]]:
    """A GPU sampled earlier that is absent from the later samples of the same host and source."""
    timed = samples.filter(pl.col("time").is_not_null() & pl.col("pci_bus_id").is_not_null())
    if timed.is_empty():
        return []
    per_gpu = (
        timed.sort("time")
        .group_by(["host", "source", "pci_bus_id"], maintain_order=True)
        .agg(
            pl.all().last(),
            interval=pl.col("time").diff().dt.total_microseconds().median() / 1e6,
        )
    )
    per_src = timed.group_by(["host", "source"]).agg(last_dump=pl.col("time").max())
    joined = per_gpu.join(per_src, on=["host", "source"], nulls_equal=True)
    tolerance = pl.max_horizontal(pl.col("interval").fill_null(0) * 1.5, pl.lit(1.0))
    gone = joined.filter((pl.col("last_dump") - pl.col("time")).dt.total_microseconds() / 1e6 > tolerance)
    return [
        _finding(
            "GPU-MISSING",
            "GPU missing from later nvidia-smi output",
            Category.HARDWARE,
            Severity.ERROR,
            Role.INITIATING,
            _sample_row(row),
            last_seen=row["time"],
            last_dump=row["last_dump"],
        )
        for row in gone.iter_rows(named=True)
    ]


def _imbalance_findings(samples: pl.DataFrame) -> list[dict[str, Any]]:
    """A GPU idling while the other GPUs of its host are busy."""
    util = samples.filter(pl.col("sm_util_pct").is_not_null() & pl.col("gpu").is_not_null())
    if util.is_empty():
        return []
    per_gpu = (
        util.group_by(["host", "gpu", "pci_bus_id"], maintain_order=True)
        .agg(pl.all().first(), util_mean=pl.col("sm_util_pct").mean())
        .with_columns(host_median=pl.col("util_mean").median().over("host"), gpus=pl.len().over("host"))
    )
    low = per_gpu.filter((pl.col("gpus") >= 2) & (pl.col("host_median") >= 50) & (pl.col("util_mean") < pl.col("host_median") / 2))
    return [
        _finding(
            "GPU-UTIL-IMBALANCE",
            "GPU utilization far below its host's other GPUs",
            Category.STRAGGLER,
            Severity.WARNING,
            Role.SYMPTOM,
            _sample_row(row),
            sm_util_mean=round(row["util_mean"], 1),
            host_median=round(row["host_median"], 1),
        )
        for row in low.iter_rows(named=True)
    ]


def _low_power_findings(samples: pl.DataFrame) -> list[dict[str, Any]]:
    """A GPU that reports itself busy but draws far less power than its limit and than its busy neighbours."""
    busy = samples.filter(
        (pl.col("sm_util_pct") >= BUSY_UTIL_PCT) & pl.col("power_draw_w").is_not_null() & pl.col("power_limit_w").is_not_null()
    )
    if busy.is_empty():
        return []
    per_gpu = (
        busy.sort("time", "line", nulls_last=True)
        .group_by(["host", "pci_bus_id", "gpu"], maintain_order=True)
        .agg(pl.all().first(), busy_samples=pl.len(), power_w=pl.col("power_draw_w").median(), limit_w=pl.col("power_limit_w").median())
        .with_columns(peer_power_w=pl.col("power_w").sum().over("host") - pl.col("power_w"), peers=pl.len().over("host") - 1)
        .with_columns(peer_power_w=pl.col("peer_power_w") / pl.col("peers"))
    )
    low = per_gpu.filter(
        (pl.col("busy_samples") >= MIN_BUSY_SAMPLES)
        & (pl.col("peers") >= 1)
        & (pl.col("power_w") < LOW_POWER_SHARE * pl.col("limit_w"))
        & (pl.col("power_w") < PEER_POWER_SHARE * pl.col("peer_power_w"))
    )
    return [
        _finding(
            "GPU-LOW-POWER-BUSY",
            f"GPU busy but drawing {row['power_w']:g} W of its {row['limit_w']:g} W limit (its host's other busy GPUs: {row['peer_power_w']:.0f} W)",
            Category.HARDWARE,
            Severity.WARNING,
            Role.SYMPTOM,
            _sample_row(row),
            power_w=row["power_w"],
            limit_w=row["limit_w"],
            peer_power_w=round(row["peer_power_w"], 1),
            busy_samples=row["busy_samples"],
        )
        for row in low.iter_rows(named=True)
    ]


def _straggler_links(findings: pl.DataFrame, metrics: pl.DataFrame | None) -> pl.DataFrame:
    """A throttled GPU whose rank is slower than its peers during the throttle window."""
    throttled = findings.filter(
        pl.col("pattern").is_in(["GPU-THERMAL-THROTTLE", "GPU-POWER-BRAKE", "GPU-HW-SLOWDOWN", "GPU-POWER-CAP"])
        & pl.col("rank").is_not_null()
    )
    if throttled.is_empty() or metrics is None or metrics.is_empty():
        return empty(FINDINGS)
    steps = metrics.filter(pl.col("step_time_s").is_not_null() & pl.col("time").is_not_null() & pl.col("rank").is_not_null())
    rows = []
    for row in throttled.iter_rows(named=True):
        caps = json.loads(row["captures"])
        start, end = pl.Series([caps.get("start"), caps.get("end")]).str.to_datetime(time_zone="UTC", time_unit="us")
        if start is None or end is None:
            continue
        window = steps.filter(pl.col("time").is_between(start, end))
        mine = window.filter(pl.col("rank") == row["rank"])["step_time_s"].median()
        peers = window.filter(pl.col("rank") != row["rank"])["step_time_s"].median()
        if mine is None or peers is None or peers <= 0 or mine / peers < STRAGGLER_SLOWDOWN:
            continue
        link = {
            **caps,
            "slowdown": round(mine / peers, 2),
            "rank_step_time_s": mine,
            "peer_step_time_s": peers,
            "explains": "straggler",
            "throttle_pattern": row["pattern"],
        }
        rows.append(
            {
                **row,
                "pattern": "GPU-THROTTLE-STRAGGLER",
                "title": f"Rank {row['rank']} is {mine / peers:.2f}x slower while its GPU throttles",
                "severity": Severity.ERROR,
                "role": Role.INITIATING,
                "category": Category.HARDWARE,
                "captures": json.dumps(link, default=str, sort_keys=True),
            }
        )
    return _frame(rows)
