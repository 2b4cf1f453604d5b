import json
import re
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest.kernel_log import parse_kernel_log
from forensics.ingest.metrics import extract_metrics
from forensics.ingest.smi_csv import parse_gpu_csv
from forensics.ingest.smi_query import parse_nvidia_smi_query
from forensics.passes.gpu_health import analyze_gpu_health
from forensics.schema import FINDINGS, LINES, conform
from tests.gpu_samples import CSV_465, H100_Q, OLD_Q

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
INIT = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO comm \S+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
    r"cudaDev (?P<cuda_dev>\d+) (?:nvmlDev \d+ )?busId (?P<pci_bus_id>[0-9a-f]+)"
)


def nccl_topology(folder: Path) -> pl.DataFrame:
    """What the NCCL helper's frame holds, built here from the fixture's init lines."""
    rows = []
    for log in sorted(folder.glob("rank_*.log")):
        for line in log.read_text().splitlines():
            if m := INIT.match(line):
                rows.append({**m.groupdict(), "comm_id": "0x5ae77eb5ea4ec1ee"})
    return (
        pl.DataFrame(rows)
        .with_columns(
            pl.col("rank", "pid", "nranks", "cuda_dev").cast(pl.Int64),
        )
        .with_columns(pl.col("rank").cast(pl.Int32))
    )


def rank_metrics(folder: Path) -> pl.DataFrame:
    frames = []
    for log in sorted(folder.glob("rank_*.log")):
        rank = int(log.stem.split("_")[1])
        text = pl.Series(log.read_text().splitlines())
        time = text.str.extract(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})").str.to_datetime(
            "%Y-%m-%d %H:%M:%S,%3f", time_zone="UTC", time_unit="us", strict=False
        )
        frames.append(
            conform(pl.DataFrame({"file": log.name, "line": range(1, len(text) + 1), "rank": rank, "time": time, "text": text}), LINES)
        )
    return extract_metrics(pl.concat(frames))


def load(folder: Path, host: str | None = None):
    samples, events = [], []
    for path in sorted(folder.rglob("*")):
        text = path.read_text() if path.is_file() else ""
        name = path.relative_to(folder).as_posix()
        if name.endswith(".csv"):
            samples.append(parse_gpu_csv(text, name, host)[0])
        elif "nvidia-smi-q" in name:
            samples.append(parse_nvidia_smi_query(text, name, host)[0])
        elif "kern" in name or "dmesg" in name:
            events.append(parse_kernel_log(text, name, host_hint=host)[0])
    return (pl.concat(samples) if samples else None), (pl.concat(events) if events else None)


def culprits(findings: pl.DataFrame) -> pl.DataFrame:
    return findings.filter((pl.col("role") == "initiating") & (pl.col("severity").is_in(["critical", "error"])))


def expected(folder: Path) -> dict:
    return json.loads((folder / "expected.json").read_text())


def test_xid79_names_the_gpu_host_and_rank():
    folder = INCIDENTS / "hw_xid79_fell_off_bus"
    samples, events = load(folder)
    topo = nccl_topology(folder)
    result = analyze_gpu_health(samples, events, topo, topo.select("rank", "pid", "host"))
    first = culprits(result.findings).row(0, named=True)
    want = expected(folder)
    assert first["pattern"] == "GPU-XID79" and first["category"] == want["category"]
    assert first["rank"] in want["culprit_ranks"] and first["host"] == "node-b"
    assert {"host": first["host"], "gpu": first["gpu"], "pci_bus_id": first["pci_bus_id"]} in want["culprit_gpus"]
    assert first["file"] == "node-b/kern.log" and first["line"] == 4
    assert json.loads(first["captures"])["rank_mapping"] == "nccl_busid"
    # the duplicate "fell off the bus" line is folded into the Xid 79 finding; Xid 45 is cascade noise
    assert "GPU-FELL-OFF-BUS" not in result.findings["pattern"].to_list()
    x45 = result.findings.filter(pl.col("pattern") == "GPU-XID45").row(0, named=True)
    assert x45["role"] == "cascade" and x45["rank"] == 7


def test_thermal_throttle_explains_the_straggler_rank():
    folder = INCIDENTS / "gpu_thermal_straggler"
    samples, events = load(folder, host="node-c")
    topo = nccl_topology(folder)
    result = analyze_gpu_health(samples, events, topo, None, rank_metrics(folder))
    throttle = result.findings.filter(pl.col("pattern") == "GPU-THERMAL-THROTTLE")
    assert throttle["gpu"].to_list() == [2] and throttle["rank"].to_list() == [2]
    caps = json.loads(throttle["captures"][0])
    assert caps["samples"] == 73 and caps["seconds"] == pytest.approx(365, abs=1)
    assert caps["sm_clock_min_mhz"] == 1275 and caps["clock_deficit"] > 0.3
    link = result.findings.filter(pl.col("pattern") == "GPU-THROTTLE-STRAGGLER").row(0, named=True)
    want = expected(folder)
    assert link["rank"] in want["culprit_ranks"] and link["category"] == want["category"]
    assert json.loads(link["captures"])["slowdown"] == pytest.approx(1.45, abs=0.01)
    assert "GPU-HW-SLOWDOWN" not in result.findings["pattern"].to_list()  # explained by the thermal reason


def test_clean_dump_produces_no_finding():
    folder = INCIDENTS / "gpu_clean_dump"
    samples, events = load(folder, host="gpu-host-1")
    assert samples is not None and samples.height == 25 and events is not None and events.is_empty()
    result = analyze_gpu_health(samples, events, nccl_topology(folder), None, rank_metrics(folder))
    assert result.findings.is_empty()
    assert result.findings.columns == list(FINDINGS)


def test_uncorrectable_ecc_maps_by_xid_pid_and_bus_id():
    folder = INCIDENTS / "hw_ecc_uncorrectable"
    samples, events = load(folder, host="node-d")
    topo = nccl_topology(folder)
    want = expected(folder)
    by_pid = analyze_gpu_health(samples, events, None, topo.select("rank", "pid"))
    x94 = by_pid.findings.filter(pl.col("pattern") == "GPU-XID94").row(0, named=True)
    assert x94["rank"] == 1 and json.loads(x94["captures"])["rank_mapping"] == "xid_pid"
    full = analyze_gpu_health(samples, events, topo, topo.select("rank", "pid", "host"))
    patterns = set(culprits(full.findings)["pattern"])
    assert {"GPU-XID94", "GPU-ECC-UNCORRECTABLE"} <= patterns
    assert full.findings.filter(pl.col("pattern") == "GPU-ROW-REMAP-PENDING").height == 1
    assert set(culprits(full.findings)["rank"]) == set(want["culprit_ranks"])
    assert set(culprits(full.findings)["pci_bus_id"]) == {"00000000:2A:00.0"}


def test_local_rank_convention_is_labelled_as_an_assumption():
    folder = INCIDENTS / "gpu_thermal_straggler"
    samples, _ = load(folder, host="node-c")
    ranks = pl.DataFrame({"rank": [0, 1, 2, 3], "host": ["node-c"] * 4})
    result = analyze_gpu_health(samples, None, None, ranks)
    throttle = result.findings.filter(pl.col("pattern") == "GPU-THERMAL-THROTTLE").row(0, named=True)
    caps = json.loads(throttle["captures"])
    assert throttle["rank"] == 2 and caps["rank_mapping"] == "assumed_local_rank" and "assumption" in caps


def test_gpu_missing_from_later_samples_and_idle_gpu():
    folder = INCIDENTS / "gpu_clean_dump"
    text = (folder / "nvidia-smi-query.csv").read_text().splitlines()
    # GPU 1 stops answering after the first minute; GPU 0 idles while... only 2 GPUs: make GPU 1 idle instead
    gone = "\n".join(ln for i, ln in enumerate(text) if not (i > 6 and ", 1, 0000" in ln)) + "\n"
    samples, _ = parse_gpu_csv(gone, "q.csv", "h")
    missing = analyze_gpu_health(samples, None).findings
    assert missing["pattern"].to_list() == ["GPU-MISSING"] and missing["gpu"].to_list() == [1]
    idle = "\n".join(ln.replace(", 100 %,", ", 3 %,") if ", 1, 0000" in ln else ln for ln in text) + "\n"
    samples, _ = parse_gpu_csv(idle, "q.csv", "h")
    assert analyze_gpu_health(samples, None).findings["pattern"].to_list() == ["GPU-UTIL-IMBALANCE"]


def test_a_busy_gpu_drawing_a_fraction_of_its_neighbours_power_is_flagged():
    text = (INCIDENTS / "gpu_clean_dump" / "nvidia-smi-query.csv").read_text()
    assert "GPU-LOW-POWER-BUSY" not in analyze_gpu_health(parse_gpu_csv(text, "q.csv", "h")[0], None).findings["pattern"].to_list()
    # GPU 1 stays at 100 % utilization but draws 95 W of its 700 W while GPU 0 draws 629 W.
    low = "\n".join(ln.replace("629.45 W", "95.12 W") if ", 1, 0000" in ln else ln for ln in text.splitlines()) + "\n"
    found = analyze_gpu_health(parse_gpu_csv(low, "q.csv", "h")[0], None).findings.filter(pl.col("pattern") == "GPU-LOW-POWER-BUSY")
    assert found.select("gpu", "category", "severity").rows() == [(1, "HARDWARE", "warning")]
    assert json.loads(found["captures"][0])["power_w"] == 95.12
    # Both GPUs low together is a light workload, not one sick GPU.
    both = text.replace("629.45 W", "95.12 W")
    assert "GPU-LOW-POWER-BUSY" not in analyze_gpu_health(parse_gpu_csv(both, "q.csv", "h")[0], None).findings["pattern"].to_list()


def test_figures_one_png_per_host(tmp_path):
    from forensics.report.gpu_figures import render_gpu_figures

    samples, _ = load(INCIDENTS / "gpu_thermal_straggler", host="node-c")
    _, events = load(INCIDENTS / "hw_xid79_fell_off_bus")
    paths = render_gpu_figures(samples, events, tmp_path)
    assert [p.name for p in paths] == ["gpu_node-c.png"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert render_gpu_figures(samples.head(0), None, tmp_path) == []


def test_a_one_off_snapshot_gets_no_chart(tmp_path):
    """A single `nvidia-smi -q` dump is one sample per GPU: a table row, not a time series."""
    from forensics.report.gpu_figures import render_gpu_figures

    snapshot, _ = parse_nvidia_smi_query((INCIDENTS / "gpu_illegal_memory_access" / "nvidia-smi-q.txt").read_text(), "q.txt")
    assert snapshot.height == 1
    assert render_gpu_figures(snapshot, None, tmp_path) == [] and not list(tmp_path.iterdir())


def _patterns(samples: pl.DataFrame) -> dict[str, dict]:
    findings = analyze_gpu_health(samples, None).findings
    return {row["pattern"]: row for row in findings.iter_rows(named=True)}


def test_a_gpu_past_its_own_slowdown_temperature_is_a_hardware_fault_in_either_driver_generation():
    # Older drivers print the threshold: 86 C current against an 82 C slowdown.
    old = _patterns(parse_nvidia_smi_query(OLD_Q, "nvidia-smi-q.txt", "node-a")[0])
    assert old["GPU-AT-SLOWDOWN-TEMP"]["severity"] == "error"
    assert json.loads(old["GPU-AT-SLOWDOWN-TEMP"]["captures"])["headroom_c"] == -4
    # Newer drivers print headroom: 26 C left against a -2 C slowdown margin is healthy...
    assert "GPU-AT-SLOWDOWN-TEMP" not in _patterns(parse_nvidia_smi_query(H100_Q, "nvidia-smi-q.txt", "node-a")[0])
    # ...and 3 C past the limit is not.
    past = H100_Q.replace("GPU T.Limit Temp                               : 26 C", "GPU T.Limit Temp                               : -3 C")
    assert "GPU-AT-SLOWDOWN-TEMP" in _patterns(parse_nvidia_smi_query(past, "nvidia-smi-q.txt", "node-a")[0])


def test_a_hot_gpu_without_a_threshold_of_its_own_is_only_a_warning():
    samples = parse_gpu_csv(CSV_465, "gpu.csv", "node-a")[0]  # 41 C idle, then 88 C at full load
    found = _patterns(samples)
    assert found["GPU-HOT"]["severity"] == "warning" and json.loads(found["GPU-HOT"]["captures"])["temperature_c"] == 88
    assert "GPU-AT-SLOWDOWN-TEMP" not in found


def test_corrected_ecc_that_climbs_between_samples_is_a_warning_and_a_steady_count_is_not():
    def dump(stamp: str, corrected: int) -> str:
        text = H100_Q.replace("Tue Jul 14 08:12:53 2026", stamp)
        return text.replace(
            "            DRAM Correctable                           : 0",
            f"            DRAM Correctable                           : {corrected}",
            1,
        )

    climbing = parse_nvidia_smi_query(dump("Tue Jul 14 08:12:53 2026", 0) + dump("Tue Jul 14 09:12:53 2026", 37), "q.txt", "node-a")[0]
    assert json.loads(_patterns(climbing)["GPU-ECC-CORRECTED-RISING"]["captures"])["after"] == 37
    steady = parse_nvidia_smi_query(dump("Tue Jul 14 08:12:53 2026", 5) + dump("Tue Jul 14 09:12:53 2026", 5), "q.txt", "node-a")[0]
    assert "GPU-ECC-CORRECTED-RISING" not in _patterns(steady)
