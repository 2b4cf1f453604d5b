import random
from datetime import UTC, datetime

import polars as pl
import pytest
from gpu_samples import (
    CSV_465,
    CSV_H100_APPS,
    CSV_NOUNITS_NOHEADER,
    DMON_H100,
    DMON_OLD,
    H100_Q,
    KERNEL_DMESG_T,
    KERNEL_LINES,
    KERNEL_MISC,
    KERNEL_OOM,
    KERNEL_SYSLOG,
    OLD_Q,
    PMON_H100,
    TOPO_H100,
)

from forensics.ingest.gpu import pci_bus_id
from forensics.ingest.gpu_sniff import sniff_gpu_kind
from forensics.ingest.kernel_log import attach_boot_times, parse_kernel_log
from forensics.ingest.smi_csv import parse_gpu_csv
from forensics.ingest.smi_dmon import parse_dmon, parse_pmon
from forensics.ingest.smi_query import parse_nvidia_smi_query
from forensics.ingest.smi_topo import parse_topo


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("PCI:0000:2b:00", "00000000:2B:00.0"),
        ("00000000:2B:00.0", "00000000:2B:00.0"),
        ("2b000", "00000000:2B:00.0"),
        ("9b000", "00000000:9B:00.0"),
        ("90", "00000000:00:09.0"),
        ("0000:03:00", "00000000:03:00.0"),
        ("PCI:0019:01:00", "00000019:01:00.0"),
        ("12b000", "00000001:2B:00.0"),
        ("0000:10:1c", "00000000:10:1C.0"),
        ("garbage", None),
        ("", None),
        (None, None),
    ],
)
def test_pci_forms_normalize_to_one_key(raw, expected):
    assert pl.select(pci_bus_id(pl.lit(raw, dtype=pl.String))).item() == expected


def test_query_new_generation():
    df, problem = parse_nvidia_smi_query(H100_Q, "q.txt", host="h1")
    assert problem is None
    row = df.row(0, named=True)
    assert row["pci_bus_id"] == "00000000:00:09.0" and row["gpu"] == 0 and row["host"] == "h1"
    assert row["time"] == datetime(2026, 7, 14, 8, 12, 53, tzinfo=UTC)
    assert row["temperature_c"] == 59 and row["power_draw_w"] == 629.45 and row["power_limit_w"] == 700
    assert row["sm_util_pct"] == 100 and row["mem_util_pct"] == 10 and row["sm_clock_mhz"] == 1980
    assert row["memory_used_mib"] == 18351 and row["memory_total_mib"] == 81559
    assert row["throttle_reasons"] == [] and row["ecc_uncorrected_volatile"] == 0
    assert row["retired_pages"] is None and row["remapped_rows_pending"] is False
    assert row["line"] == 9


def test_query_old_generation_and_concatenated_dumps():
    df, _ = parse_nvidia_smi_query(H100_Q + OLD_Q, "q.txt")
    assert df["gpu"].to_list() == [0, 0, 1]  # index restarts with each dump
    v100 = df.row(1, named=True)
    assert v100["throttle_reasons"] == ["hw_slowdown", "hw_thermal"]
    assert (v100["ecc_corrected_volatile"], v100["ecc_uncorrected_volatile"]) == (3, 1)
    assert (v100["ecc_corrected_aggregate"], v100["ecc_uncorrected_aggregate"]) == (12, 2)
    assert v100["retired_pages"] == 1 and v100["retired_pages_pending"] is True
    assert v100["power_draw_w"] == 251.33 and v100["power_limit_w"] == 300
    assert df.row(2, named=True)["pci_bus_id"] == "00000000:1B:00.0"


def test_csv_with_old_names_units_and_bitmask():
    df, problem = parse_gpu_csv(CSV_465, "q.csv")
    assert problem is None and df.height == 2
    assert df["pci_bus_id"].to_list() == ["00000000:0C:00.0"] * 2
    assert df["throttle_reasons"].to_list() == [[], ["hw_slowdown", "hw_thermal"]]
    assert df["power_draw_w"].to_list() == [9.47, 240.1] and df["sm_clock_mhz"].to_list() == [300, 1350]
    assert df["time"][0] == datetime(2021, 6, 10, 0, 55, 54, 492000, tzinfo=UTC)


def test_csv_without_header_with_given_columns_and_null_tokens():
    cols = ["timestamp", "index", "pci.bus_id", "temperature.gpu", "power.draw", "power.limit", "utilization.gpu", "clocks.sm"]
    df, problem = parse_gpu_csv(CSV_NOUNITS_NOHEADER, "q.csv", columns=cols)
    assert problem is None
    assert df["gpu"].to_list() == [0, 1] and df["temperature_c"].to_list() == [63, None]
    assert df["power_draw_w"].to_list() == [631.2, None]
    inferred, problem = parse_gpu_csv(CSV_NOUNITS_NOHEADER, "q.csv")
    assert problem and "no CSV header" in problem and inferred["pci_bus_id"][1] == "00000000:9B:00.0"


def test_compute_apps_csv_keeps_identity():
    df, _ = parse_gpu_csv(CSV_H100_APPS, "apps.csv")
    assert df["pci_bus_id"].to_list() == ["00000000:00:09.0"] and df["name"][0] == "NVIDIA H100 80GB HBM3"


def test_dmon_both_layouts_and_repeated_headers():
    df, problem = parse_dmon(DMON_H100 + DMON_H100, "dmon.txt")
    assert problem is None and df.height == 4
    assert df["power_draw_w"].to_list()[:2] == [631, 634] and df["sm_clock_mhz"][0] == 1980
    assert df["time"].is_null().all()
    old, _ = parse_dmon(DMON_OLD, "dmon.txt")
    assert old["temperature_c"][0] == 83 and old["memory_used_mib"][0] == 11651
    assert old["ecc_uncorrected_volatile"][0] is None


def test_dmon_with_date_and_time_columns():
    text = (
        "#Date       Time        gpu    pwr  gtemp     sm    mem   pclk\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      C      %      %    MHz\n"
        " 20240105   10:11:12      0    631     63    100     10   1980\n"
    )
    df, _ = parse_dmon(text, "dmon.txt")
    assert df["time"][0] == datetime(2024, 1, 5, 10, 11, 12, tzinfo=UTC)


def test_pmon_rows():
    df, _ = parse_pmon(PMON_H100, "pmon.txt")
    assert df["pid"].to_list() == [11327, 11345] and df["process"].to_list() == ["memhog", "gpu_burn"]
    assert df["sm_util_pct"].to_list() == [None, 99]


def test_topo_strips_ansi_header():
    df, problem = parse_topo(TOPO_H100, "topo.txt")
    assert problem is None
    assert df.select("device", "peer", "link", "cpu_affinity", "numa_affinity").row(0) == ("GPU0", "GPU0", "X", "0-19", "0")


def test_kernel_xid_lines_every_timestamp_form():
    text = KERNEL_LINES + KERNEL_DMESG_T + KERNEL_SYSLOG + KERNEL_MISC + KERNEL_OOM
    ev, problem = parse_kernel_log(text, "kern.log", host_hint="n1")
    assert problem is None
    xids = ev.filter(pl.col("kind") == "xid")
    assert xids["xid"].to_list() == [31, 13, 13, 109, 79, 119, 154, 63, 94, 149]
    x109 = xids.filter(pl.col("xid") == 109).row(0, named=True)
    assert x109["pid"] == 1797828 and x109["process"] == "pt_main_thread"
    assert x109["time"] == datetime(2024, 8, 30, 11, 43, 14, tzinfo=UTC)
    x79 = xids.filter(pl.col("xid") == 79).row(0, named=True)
    assert x79["pci_bus_id"] == "00000000:2B:00.0" and x79["fatal"] and x79["uuid"].startswith("GPU-0b11d014")
    talos = xids.filter(pl.col("xid") == 154).row(0, named=True)
    assert talos["host"] == "192.168.11.119" and talos["time"].year == 2026
    assert ev.filter(pl.col("kind") == "fell_off_bus").height == 1
    ooms = ev.filter(pl.col("kind") == "host_oom")
    assert ooms["pid"].to_list() == [698405, 1440763]
    assert ooms["time"][1] == datetime(2024, 4, 29, 12, 55, 41, 679700, tzinfo=UTC)


def test_kernel_aer_and_sxid():
    text = (
        "[  124.582910] pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0\n"
        "Dec  1 02:16:37 bd-cpu18 kernel: pcieport 0000:00:01.0: AER: Corrected error received: id=0008\n"
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)\n"
    )
    ev, _ = parse_kernel_log(text, "kern.log", default_year=2020)
    assert ev["kind"].to_list() == ["pcie_aer", "pcie_aer", "sxid"]
    assert ev["severity"].to_list() == ["critical", "warning", "warning"]
    assert ev["pci_bus_id"].to_list() == ["00000000:01:00.0", None, "00000000:05:00.0"]
    assert ev["host"][1] == "bd-cpu18" and ev["time"][1] == datetime(2020, 12, 1, 2, 16, 37, tzinfo=UTC)


def test_dmesg_uptime_becomes_wall_time_from_btime_or_companion():
    raw = "[100.500000] NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
    alone, _ = parse_kernel_log(raw, "dmesg.txt", host_hint="n1")
    assert alone["time"][0] is None and alone["uptime_s"][0] == 100.5
    with_btime, _ = parse_kernel_log("btime 1725018089\n" + raw, "dmesg.txt", host_hint="n1")
    assert with_btime["time"][0] == datetime(2024, 8, 30, 11, 43, 9, 500000, tzinfo=UTC)
    companion, _ = parse_kernel_log(raw.replace("[100.500000]", "[Fri Aug 30 11:43:09 2024]"), "dmesg_T.txt", "n1")
    aligned = attach_boot_times(pl.concat([alone, companion]))
    assert aligned["time"][0] == datetime(2024, 8, 30, 11, 43, 9, tzinfo=UTC)


def test_sniffer_kinds():
    assert sniff_gpu_kind(H100_Q[:500]) == "nvidia_smi_q"
    assert sniff_gpu_kind(CSV_465) == "nvidia_smi_csv"
    assert sniff_gpu_kind(CSV_NOUNITS_NOHEADER) == "nvidia_smi_csv"
    assert sniff_gpu_kind(DMON_H100) == "nvidia_smi_dmon" and sniff_gpu_kind(PMON_H100) == "nvidia_smi_dmon"
    assert sniff_gpu_kind(TOPO_H100) == "nvidia_smi_topo"
    assert sniff_gpu_kind(KERNEL_SYSLOG) == "kernel_log" and sniff_gpu_kind(KERNEL_OOM) == "kernel_log"
    assert sniff_gpu_kind("2026-03-03 12:00:01,123 INFO step 10 loss 2.31\n") is None


PARSERS = [parse_nvidia_smi_query, parse_gpu_csv, parse_dmon, parse_pmon, parse_topo, parse_kernel_log]
TEXTS = [H100_Q, OLD_Q, CSV_465, DMON_OLD, PMON_H100, TOPO_H100, KERNEL_DMESG_T + KERNEL_SYSLOG]


@pytest.mark.parametrize("parser", PARSERS)
def test_hostile_input_never_crashes(parser):
    rng = random.Random(7)
    junk = bytes(rng.randrange(256) for _ in range(4000)).decode("utf-8", errors="replace")
    frame, problem = parser(junk, "junk.bin")
    assert isinstance(frame, pl.DataFrame) and problem is not None or frame.is_empty()
    for text in TEXTS:
        for cut in (len(text) // 2, len(text) // 3, 7):
            frame, _ = parser(text[:cut], "cut.txt")
            assert isinstance(frame, pl.DataFrame)
    frame, _ = parser("", "empty.txt")
    assert frame.is_empty()


def test_truncated_query_keeps_the_complete_part():
    df, _ = parse_nvidia_smi_query(OLD_Q[: OLD_Q.index("GPU 00000000:1B:00.0") + 60], "q.txt")
    assert df.height == 2 and df["temperature_c"][0] == 86 and df["temperature_c"][1] is None


@pytest.mark.parametrize("xml", [False, True], ids=["-q", "-q -x"])
def test_a_dump_filtered_to_fewer_gpus_than_attached_leaves_the_index_unknown(xml):
    """The real H100 dumps (fixtures/formats) list their one attached GPU, at index 0. The same dump
    saying 8 are attached is what `nvidia-smi -q -i 5` prints: the GPU listed first is not GPU 0
    (nor is its Minor Number its index), so only its bus id identifies it."""
    from pathlib import Path

    from forensics.ingest.smi_query import parse_nvidia_smi_xml

    formats = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
    name, parse = (
        ("smi_nvidia_h100_80gb_hbm3_q_x.xml", parse_nvidia_smi_xml) if xml else ("smi_nvidia_h100_80gb_hbm3_q", parse_nvidia_smi_query)
    )
    text = (formats / name).read_text()
    whole, _ = parse(text, name)
    assert whole.select("gpu", "pci_bus_id").rows() == [(0, "00000000:00:06.0")]
    one_of_eight = (
        text.replace("<attached_gpus>1<", "<attached_gpus>8<")
        if xml
        else text.replace(
            "Attached GPUs                                          : 1", "Attached GPUs                                          : 8"
        )
    )
    assert one_of_eight != text
    filtered, _ = parse(one_of_eight, name)
    assert filtered.select("gpu", "pci_bus_id").rows() == [(None, "00000000:00:06.0")]
