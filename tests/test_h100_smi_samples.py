"""Every nvidia-smi mode captured from a real H100 (fixtures/formats/smi_nvidia_h100_80gb_hbm3_*,
made by fixtures/generate/capture_nvidia_smi.sh) is sniffed as what it is and read to the values
it printed; the text and XML reports of the same GPU, a second apart, agree."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from forensics.ingest.gpu_sniff import sniff_gpu_kind
from forensics.ingest.smi_csv import parse_gpu_csv
from forensics.ingest.smi_dmon import parse_dmon
from forensics.ingest.smi_query import parse_nvidia_smi_query, parse_nvidia_smi_xml
from forensics.ingest.smi_topo import parse_topo

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
PREFIX = "smi_nvidia_h100_80gb_hbm3_"
BUS = "00000000:00:06.0"


def _text(mode: str) -> str:
    return (FORMATS / f"{PREFIX}{mode}").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "mode, kind",
    [("q", "nvidia_smi_q"), ("q_x.xml", "nvidia_smi_q_xml"), ("q_perf", "nvidia_smi_q"), ("q_ecc", "nvidia_smi_q"),
     ("load_query.csv", "nvidia_smi_csv"), ("idle_dmon", "nvidia_smi_dmon"), ("load_dmon", "nvidia_smi_dmon"), ("topo_m", "nvidia_smi_topo")],
)  # fmt: skip
def test_each_mode_is_sniffed_from_its_first_lines(mode, kind):
    assert sniff_gpu_kind(_text(mode)[:2000]) == kind


def test_the_xml_report_reads_to_the_same_sample_as_the_text_report_of_the_same_gpu():
    xml_samples, problem = parse_nvidia_smi_xml(_text("q_x.xml"), "q_x.xml")
    (xml,) = xml_samples.iter_rows(named=True)
    (text,) = parse_nvidia_smi_query(_text("q"), "q")[0].iter_rows(named=True)
    assert problem is None
    assert (xml["pci_bus_id"], xml["name"], xml["source"]) == (BUS, "NVIDIA H100 80GB HBM3", "nvidia_smi_q_xml")
    assert abs((xml["time"] - text["time"]).total_seconds()) <= 2
    same = {k for k in xml if k not in ("time", "file", "line", "source")}
    assert {k: xml[k] for k in same} == {k: text[k] for k in same}
    assert (xml["temperature_c"], xml["thermal_headroom_c"], xml["power_limit_w"], xml["ecc_corrected_aggregate"]) == (38.0, 51.0, 700.0, 1)


def test_the_xml_report_is_read_as_lines_and_expands_no_entity():
    hostile = (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY big "xxxxxxxxxxxxxxxx"><!ENTITY a "&big;&big;&big;&big;">]>\n'
        "<nvidia_smi_log>\n\t<timestamp>Tue Nov 24 18:47:29 2026</timestamp>\n"
        '\t<gpu id="00000000:00:06.0">\n\t\t<product_name>&a;</product_name>\n\t</gpu>\n</nvidia_smi_log>\n'
    )
    (row,) = parse_nvidia_smi_xml(hostile, "x.xml")[0].iter_rows(named=True)
    assert row["name"] == "&a;"


def test_the_csv_sampled_under_load_reads_power_clocks_and_null_tokens():
    df, problem = parse_gpu_csv(_text("load_query.csv"), "load_query.csv")
    assert problem is None and df.height >= 15
    assert df["power_draw_w"].min() > 400 and df["sm_util_pct"].min() == 100 and df["sm_clock_mhz"].max() == 1980
    assert df["throttle_reasons"].list.len().max() == 0
    assert df["retired_pages_pending"].is_null().all(), "[N/A] is no reading, not False"
    assert df["time"].min() == datetime.fromisoformat("2026-11-24T18:47:45.822+00:00")


def test_dmon_with_and_without_a_date_column():
    loaded, _ = parse_dmon(_text("load_dmon"), "load_dmon")
    idle, _ = parse_dmon(_text("idle_dmon"), "idle_dmon")
    assert loaded["time"].min() == datetime.fromisoformat("2026-11-24T18:47:36+00:00")
    assert loaded["power_draw_w"].max() > 400 and idle["power_draw_w"].max() < 200
    assert idle.height == 5 and idle["time"].is_null().all(), "`-o T` prints a time of day but no date: no instant"


def test_topology_of_a_single_gpu_vm_has_no_links():
    df, problem = parse_topo(_text("topo_m"), "topo_m")
    assert problem is None
    assert df.select("device", "peer", "link", "cpu_affinity", "numa_affinity").rows() == [("GPU0", "GPU0", "X", "0-15", "0")]


def test_a_dmon_whose_names_line_is_cut_off_reads_no_rows_instead_of_failing():
    """Found by tests/test_properties.py: the units line (`#HH:MM:SS Idx W C C %`) repeats names."""
    for cut in (_text("idle_dmon").split("\n", 1)[1], "# \n" + _text("idle_dmon").split("\n", 1)[1]):
        samples, problem = parse_dmon(cut, "dmon")
        assert samples.is_empty() and problem


def test_a_csv_header_that_names_a_field_twice_reads_the_first():
    text = _text("load_query.csv").replace("timestamp,", "timestamp,timestamp, ", 1)
    text = "\n".join(
        [text.split("\n")[0]] + [line.replace(", ", ", 2026/11/24 18:47:45.822, ", 1) if line else line for line in text.split("\n")[1:]]
    )
    samples, _ = parse_gpu_csv(text, "q.csv")
    assert samples.height >= 15 and samples["power_draw_w"].min() > 400
