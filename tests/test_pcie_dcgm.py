"""lspci link states and dcgmi tables from real posted output (fixtures/formats), and what they decide."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from forensics.flow import analyze
from forensics.ingest.dcgm import parse_dcgm
from forensics.ingest.pcie import parse_pcie
from forensics.passes.fabric import dcgm_findings, pcie_findings
from forensics.report.cluster_section import render_cluster
from forensics.schema import LINES, conform

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def _lines(texts: list[str], path: str) -> pl.DataFrame:
    return conform(pl.DataFrame({"file": path, "line": range(1, len(texts) + 1), "text": texts}), LINES)


def _sample(folder: str, as_path: str = "node-b/sample.txt") -> pl.DataFrame:
    (path,) = (FORMATS / folder).glob("*.txt")
    return _lines(path.read_text(encoding="utf-8").splitlines(), as_path)


RTX6000 = "VGA compatible controller: NVIDIA Corporation AD102GL [RTX 6000 Ada Generation] (rev a1) (prog-if 00 [VGA controller])"


@pytest.mark.parametrize(
    ("folder", "line", "bus_id", "device", "cap", "now", "marked"),
    [
        # An excerpt that starts mid-device: no header, no LnkCap; lspci itself marks both downgraded.
        ("lspci_geerling480_quadro_rtx8000_x1", 4, None, None, (None, None), (5.0, 1), (True, True)),
        # Only the two link lines, 4-space indented, with lspci's `(ok)` mark on the width.
        ("lspci_jan183_rtx4090_riser_gen1", 2, None, None, (16.0, 16), (2.5, 16), (True, False)),
        # A healthy Gen5 x16 NIC; this lspci prints no marks at all.
        (
            "lspci_stelline_connectx7_gen5_x16", 22, "00000000:81:00.0",
            "Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]", (32.0, 16), (32.0, 16), (False, False),
        ),
        # An idle GPU at Gen1 speed, full width.
        ("lspci_stelline_rtx6000ada_idle_gen1", 31, "00000000:01:00.0", RTX6000, (16.0, 16), (2.5, 16), (True, False)),
    ],
)  # fmt: skip
def test_lspci_links(folder, line, bus_id, device, cap, now, marked):
    (link,) = parse_pcie(_sample(folder))["pcie_links"].iter_rows(named=True)
    assert (link["line"], link["host"], link["pci_bus_id"], link["device"]) == (line, "node-b", bus_id, device)
    assert (link["cap_speed_gts"], link["cap_width"]) == cap
    assert (link["speed_gts"], link["width"]) == now
    assert (link["speed_downgraded"], link["width_downgraded"]) == marked
    assert link["text"].strip().startswith("LnkSta:")


@pytest.mark.parametrize(
    ("folder", "pattern", "severity", "role"),
    [
        ("lspci_geerling480_quadro_rtx8000_x1", "FABRIC002", "error", "symptom"),  # x1, marked (downgraded)
        ("lspci_jan183_rtx4090_riser_gen1", "FABRIC003", "warning", "event"),  # 2.5 of 16 GT/s at x16
        ("lspci_stelline_rtx6000ada_idle_gen1", "FABRIC003", "warning", "event"),  # idle: power saving
        ("lspci_stelline_connectx7_gen5_x16", None, None, None),  # at capability
    ],
)
def test_a_narrow_link_is_a_fault_a_slow_one_only_a_note(folder, pattern, severity, role):
    lines = _sample(folder)
    found = pcie_findings(parse_pcie(lines)["pcie_links"])
    assert found["pattern"].to_list() == ([pattern] if pattern else [])
    if pattern:
        (finding,) = found.iter_rows(named=True)
        assert (finding["category"], finding["severity"], finding["role"], finding["host"]) == ("HARDWARE", severity, role, "node-b")
        cited = lines.filter(pl.col("line") == finding["line"]).row(0, named=True)
        assert (finding["file"], finding["text"]) == ("node-b/sample.txt", cited["text"])
        assert "LnkSta:" in finding["text"]


def test_the_width_rule_compares_lnksta_with_lnkcap():
    """The real LnkCap line of a x16 card, then the real LnkSta line of a link trained at x1."""
    cap = (FORMATS / "lspci_jan183_rtx4090_riser_gen1" / "lspci.txt").read_text(encoding="utf-8").splitlines()[0]
    sta = (FORMATS / "lspci_geerling480_quadro_rtx8000_x1" / "lspci.txt").read_text(encoding="utf-8").splitlines()[3]
    links = parse_pcie(_lines([cap, sta], "gpu-node-3/lspci.txt"))["pcie_links"]
    assert links.select("cap_width", "width", "cap_speed_gts", "speed_gts").row(0) == (16, 1, 16.0, 5.0)
    (finding,) = pcie_findings(links).iter_rows(named=True)
    assert (finding["pattern"], finding["host"], finding["line"], finding["text"]) == ("FABRIC002", "gpu-node-3", 2, sta)
    assert finding["title"].startswith("PCIe link narrower than it can run: x1 of x16")


def test_lspci_at_the_top_of_the_folder_names_a_host_only_from_its_file_name():
    sta = (FORMATS / "lspci_jan183_rtx4090_riser_gen1" / "lspci.txt").read_text(encoding="utf-8").splitlines()
    assert parse_pcie(_lines(sta, "lspci.txt"))["pcie_links"]["host"].to_list() == [None]
    assert parse_pcie(_lines(sta, "lspci_node-c.txt"))["pcie_links"]["host"].to_list() == ["node-c"]


@pytest.mark.parametrize(
    ("folder", "host", "rows"),
    [
        # DCGM 3.x: one row per test; the excerpt keeps the first Deployment row only.
        ("dcgmi_dcgm198_diag_r2_head", "node-b", [(11, "Deployment", "Denylist", "Pass", None)]),
        # DCGM 4.x: the test's own row, then one row per GPU; the host is the one the GPU operator's wrapper names.
        (
            "dcgmi_dcgm253_diag_v423_head", "10.0.7.139",
            [(11, "Deployment", "software", "Pass", None)] + [(12 + gpu, "Deployment", "software", "Pass", gpu) for gpu in range(4)],
        ),
    ],
)  # fmt: skip
def test_dcgmi_diag_results(folder, host, rows):
    tables = parse_dcgm(_sample(folder))
    diag = tables["dcgm_diag"]
    assert diag.select("line", "section", "test", "result", "gpu").rows() == rows
    assert diag["host"].unique().to_list() == [host]
    assert tables["nvlink_status"].is_empty()
    assert dcgm_findings(diag, tables["nvlink_status"]).is_empty()


def test_a_failed_gpu_row_is_the_finding_not_its_tests_own_row():
    """No real failing diag table is at hand: the real DCGM 4 table's results set to Fail on
    the test's row and on GPU2's, as DCGM 4 prints a failure on one GPU."""
    diag = parse_dcgm(_sample("dcgmi_dcgm253_diag_v423_head"))["dcgm_diag"]
    failing = diag.with_columns(result=pl.when(pl.col("line").is_in([11, 14])).then(pl.lit("Fail")).otherwise("result"))
    (finding,) = dcgm_findings(failing, None).iter_rows(named=True)
    assert (finding["pattern"], finding["line"], finding["gpu"], finding["host"]) == ("DCGM001", 14, 2, "10.0.7.139")
    assert (finding["category"], finding["severity"], finding["role"]) == ("HARDWARE", "critical", "initiating")
    alone = diag.filter(pl.col("line") == 11).with_columns(result=pl.lit("Fail"))  # a 3.x-style row with no GPU rows
    assert dcgm_findings(alone, None).select("line", "gpu").rows() == [(11, None)]


def test_dcgmi_nvlink_status_all_down():
    lines = _sample("dcgmi_dcgm198_nvlink_all_down")
    tables = parse_dcgm(lines)
    assert tables["dcgm_diag"].is_empty()
    status = tables["nvlink_status"]
    assert status.select("line", "entity", "id", "links", "up", "down", "disabled").rows() == [
        (7, "gpu", 0, 18, 0, 18, 0),
        (9, "gpu", 1, 18, 0, 18, 0),
    ]
    found = dcgm_findings(None, status)
    assert found.select("pattern", "gpu", "line", "host").rows() == [("DCGM002", 0, 7, "node-b"), ("DCGM002", 1, 9, "node-b")]
    assert found["text"].to_list() == lines.filter(pl.col("line").is_in([7, 9]))["text"].to_list()
    assert json.loads(found["captures"][0])["down"] == 18


def test_nvlinks_down_on_one_host_make_the_verdict_and_an_idle_link_elsewhere_does_not(tmp_path):
    """DCGM/#198's link status saved under gpu-node-7/, the idle Gen1 GPU's lspci under gpu-node-3/."""
    for host, folder, name in [
        ("gpu-node-7", "dcgmi_dcgm198_nvlink_all_down", "dcgmi_nvlink.txt"),
        ("gpu-node-3", "lspci_stelline_rtx6000ada_idle_gen1", "lspci.txt"),
    ]:
        (tmp_path / host).mkdir()
        shutil.copy(FORMATS / folder / name, tmp_path / host / name)
    analysis = analyze(tmp_path)
    assert (analysis.verdict.category, analysis.verdict.culprit_hosts) == ("HARDWARE", ["gpu-node-7"])
    assert {e["pattern"] for e in analysis.verdict.hypotheses[0].evidence} == {"DCGM002"}
    assert "FABRIC003" in analysis.incident.findings["pattern"].to_list()
    section = render_cluster(analysis.incident.tables)
    assert "| gpu-node-7 | NVLink status | GPU 1 | 18 of 18 links Down | `gpu-node-7/dcgmi_nvlink.txt:9` |" in section
    assert "| gpu-node-3 | " in section and "| x16 of x16 | 2.5 GT/s of 16 GT/s | `gpu-node-3/lspci.txt:31` |" in section


def test_an_idle_gen1_link_alone_makes_no_verdict(tmp_path):
    (tmp_path / "gpu-node-3").mkdir()
    shutil.copy(FORMATS / "lspci_stelline_rtx6000ada_idle_gen1" / "lspci.txt", tmp_path / "gpu-node-3" / "lspci.txt")
    analysis = analyze(tmp_path)
    assert analysis.verdict.category != "HARDWARE"
    assert analysis.incident.findings.filter(pl.col("pattern") == "FABRIC003")["severity"].to_list() == ["warning"]


@pytest.mark.parametrize(
    "sample, kind, table",
    [
        ("lspci_jan183_rtx4090_riser_gen1", "lspci", "pcie_links"),
        ("dcgmi_dcgm198_nvlink_all_down", "dcgmi", "nvlink_status"),
        ("ibstat_gpud482_down_polling", "ibstat", "ib_ports"),
        ("nccltests_a3mega_2node_h100", "nccl_tests", "nccl_test_runs"),
    ],
)
def test_each_cluster_tool_s_output_is_listed_as_what_it_is_whatever_its_name(tmp_path, sample, kind, table):
    (source,) = [p for p in (FORMATS / sample).iterdir() if p.name != "SOURCE.md"]
    shutil.copy(source, tmp_path / "node3.txt")
    analysis = analyze(tmp_path)
    assert analysis.incident.inputs.filter(pl.col("path") == "node3.txt")["kind"].to_list() == [kind]
    assert not analysis.incident.tables[table].is_empty()
