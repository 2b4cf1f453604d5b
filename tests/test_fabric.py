"""nccl-tests runs and ibstat ports from real posted output (fixtures/formats), and what they decide."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from forensics.flow import analyze
from forensics.ingest.fabric import parse_fabric
from forensics.ingest.nccl import parse_nccl
from forensics.report.cluster_section import render_cluster
from forensics.schema import LINES, conform

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
PUBLIC = Path(__file__).resolve().parents[1] / "fixtures" / "public"


def _frames(folder: str, name: str, as_path: str | None = None) -> dict[str, pl.DataFrame]:
    text = (FORMATS / folder / name).read_text(encoding="utf-8").splitlines()
    lines = pl.DataFrame({"file": as_path or f"{folder}/{name}", "line": range(1, len(text) + 1), "text": text})
    return parse_fabric(conform(lines, LINES))


@pytest.mark.parametrize(
    ("folder", "ranks", "hosts", "sizes", "largest", "busbw", "avg"),
    [
        # 2 x 8 H100 (nccl-tests 2.x, `#wrong`): 8 GiB at 338.82 GB/s, average 70.742.
        ("nccltests_a3mega_2node_h100", 16, ["ztan-mig-235z", "ztan-mig-gq73"], 31, 8589934592, 338.82, 70.742),
        # A header-less excerpt behind mpirun's `[1,0]<stdout>:` with the older `error` column (2e-07).
        ("nccltests_awsefaeks_p4d_2node_efa", None, None, 28, 1073741824, 32.71, 7.80081),
        # Runs that failed before their first size: ranks and hosts from the `# Rank` lines, no results.
        ("nccltests_219_2node_internal_error", 4, ["fengyun", "fengyun416"], None, None, None, None),
        ("nccltests_5_old_format_cuda_error", 8, ["node03"], None, None, None, None),
    ],
)
def test_nccl_tests_runs(folder, ranks, hosts, sizes, largest, busbw, avg):
    run = _frames(folder, "all_reduce_perf.txt")["nccl_test_runs"].row(0, named=True)
    assert (run["ranks"], run["hosts"], run["sizes"]) == (ranks, hosts, sizes)
    assert (run["max_size_bytes"], run["max_size_busbw_gbs"], run["avg_busbw_gbs"]) == (largest, busbw, avg)


def test_nccl_tests_devices_in_three_header_formats():
    new = _frames("nccltests_a3mega_2node_h100", "all_reduce_perf.txt")["nccl_test_devices"].row(15, named=True)
    assert (new["rank"], new["pid"], new["host"], new["device"], new["bus_id"]) == (15, 6740, "ztan-mig-gq73", 7, "0000:8c:00")
    old = _frames("nccltests_5_old_format_cuda_error", "all_reduce_perf.txt")["nccl_test_devices"].row(0, named=True)
    assert (old["rank"], old["pid"], old["host"], old["gpu_model"]) == (0, None, "node03", "Tesla P100-PCIE-16GB")


@pytest.mark.parametrize(
    ("folder", "ca", "state", "physical", "rate"),
    [
        ("ibstat_gpud482_down_polling", "mlx5_10", "Down", "Polling", 10.0),
        ("ibstat_gpud99_down_disabled", "mlx5_8", "Down", "Disabled", None),
        ("ibstat_netop249_down_linkup", "mlx5_7", "Down", "LinkUp", 200.0),
        ("ibstat_gpud752_active_linkup", "mlx5_7", "Active", "LinkUp", 200.0),
    ],
)
def test_ibstat_ports_take_their_host_from_the_folder(folder, ca, state, physical, rate):
    port = _frames(folder, "ibstat.txt", as_path="node-b/ibstat.txt")["ib_ports"].row(0, named=True)
    assert (port["host"], port["ca"], port["port"], port["state"], port["physical_state"], port["rate_gbps"]) == (
        "node-b",
        ca,
        1,
        state,
        physical,
        rate,
    )
    assert port["text"].strip().startswith("State:")


def test_a_port_down_on_one_host_names_that_host_though_the_errors_come_from_every_host(tmp_path):
    """NVIDIA/nccl-tests#252 as posted (IB completion errors logged on kolyoz2, proxy errors on
    kolyoz1) with a real ibstat of a port down saved under kolyoz1/: the host is kolyoz1."""
    shutil.copy(next(PUBLIC.glob("nccl_tests_252_*")) / "console.log", tmp_path / "console.log")
    (tmp_path / "kolyoz1").mkdir()
    shutil.copy(FORMATS / "ibstat_gpud482_down_polling" / "ibstat.txt", tmp_path / "kolyoz1" / "ibstat.txt")
    analysis = analyze(tmp_path)
    assert (analysis.verdict.category, analysis.verdict.culprit_hosts) == ("NETWORK", ["kolyoz1"])
    cited = [e["pattern"] for e in analysis.verdict.hypotheses[0].evidence]
    assert "FABRIC001" in cited
    section = render_cluster(analysis.incident.tables)
    assert "| kolyoz1 | mlx5\\_10 | 1 | Down | Polling | 10 Gb/s | `kolyoz1/ibstat.txt:9` |" in section


def test_an_active_port_is_no_finding_and_without_the_port_the_host_is_the_one_that_logged(tmp_path):
    shutil.copy(next(PUBLIC.glob("nccl_tests_252_*")) / "console.log", tmp_path / "console.log")
    (tmp_path / "kolyoz1").mkdir()
    shutil.copy(FORMATS / "ibstat_gpud752_active_linkup" / "ibstat.txt", tmp_path / "kolyoz1" / "ibstat.txt")
    analysis = analyze(tmp_path)
    assert "FABRIC001" not in analysis.incident.findings["pattern"].to_list()
    assert analysis.verdict.culprit_hosts == ["kolyoz2"]


def test_the_cluster_section_lists_each_nccl_setting_and_the_processes_that_disagree():
    lines = [  # two hosts of a public nccl-tests log; the second host's NCCL_ALGO differs
        "tpgds-aihub0007:196837:196837 [7] NCCL INFO NCCL_PROTO set by environment to Simple",
        "tpgds-aihub0007:196837:196837 [7] NCCL INFO NCCL_ALGO set by environment to Ring",
        "tpgds-aihub0007:196836:196836 [6] NCCL INFO NCCL_ALGO set by environment to Ring",
        "gpu-dev-dc07a789:1799:1799 [3] NCCL INFO NCCL_ALGO set by environment to ring,tree",
        "4c217144f0b1:113168:113179 [0] NCCL INFO Using network IB",
    ]
    frame = conform(pl.DataFrame({"file": "console.log", "line": range(1, len(lines) + 1), "text": lines}), LINES)
    section = render_cluster(parse_nccl(frame))
    assert "| NCCL\\_ALGO | Ring | 2 | `console.log:2` |" in section
    assert "| NCCL\\_ALGO | ring,tree | 1 | `console.log:4` |" in section
    assert "| network | IB | 1 | `console.log:5` |" in section
    assert section.index("| NCCL\\_ALGO | Ring |") < section.index("| NCCL\\_ALGO | ring,tree |")
    assert "NCCL\\_ALGO differ between them" in section and "NCCL\\_PROTO differ" not in section


@pytest.mark.parametrize(
    ("folder", "ports", "state", "physical", "rates", "layers"),
    [
        # Tab-indented, every port turned off; one is RoCE (Ethernet) at 40 Gb/s.
        ("ibstatus_nccl1935_all_down_disabled", ["mlx5_11", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"], "Down", "Disabled",
         [10.0, 40.0, 10.0, 10.0, 10.0], ["InfiniBand", "Ethernet", "InfiniBand", "InfiniBand", "InfiniBand"]),
        # Space-indented, both ports up.
        ("ibstatus_nccl1866_active_linkup", ["mlx5_0", "mlx5_1"], "Active", "LinkUp", [100.0, 100.0], ["Ethernet", "Ethernet"]),
    ],
)  # fmt: skip
def test_ibstatus_blocks_read_as_ibstat_ports(folder, ports, state, physical, rates, layers):
    frame = _frames(folder, "ibstatus.txt", as_path="ibstatus_gpu-07.txt")["ib_ports"]
    assert frame["ca"].to_list() == ports
    assert set(frame["state"]) == {state} and set(frame["physical_state"]) == {physical}
    assert frame["rate_gbps"].to_list() == rates and frame["link_layer"].to_list() == layers
    assert set(frame["host"]) == {"gpu-07"} and set(frame["port"]) == {1}
    assert all(text.strip().startswith("state:") for text in frame["text"])


def test_a_turned_off_port_is_a_note_unless_another_host_has_it_up(tmp_path):
    """A Disabled port that no host uses is a spare port; the same port Active on a peer makes it a fault."""
    (tmp_path / "gpu-a").mkdir()
    shutil.copy(FORMATS / "ibstatus_nccl1935_all_down_disabled" / "ibstatus.txt", tmp_path / "gpu-a" / "ibstatus.txt")
    alone = analyze(tmp_path).incident.findings.filter(pl.col("pattern") == "FABRIC001")
    assert alone.height == 5 and set(alone["severity"]) == {"warning"} and set(alone["role"]) == {"event"}
    # A second host with mlx5_2 port 1 Active, as ibstat prints it: gpu-a's mlx5_2 is now the odd one out.
    (tmp_path / "gpu-b").mkdir()
    ibstat = (FORMATS / "ibstat_gpud752_active_linkup" / "ibstat.txt").read_text(encoding="utf-8")
    (tmp_path / "gpu-b" / "ibstat.txt").write_text(ibstat.replace("CA 'mlx5_7'", "CA 'mlx5_2'"), encoding="utf-8")
    paired = analyze(tmp_path).incident.findings.filter(pl.col("pattern") == "FABRIC001")
    critical = paired.filter(pl.col("severity") == "critical")
    assert critical["host"].to_list() == ["gpu-a"] and critical["title"].to_list() == [
        "InfiniBand port mlx5_2 port 1 is Down (physical state Disabled)"
    ]


def test_a_test_run_that_lists_its_devices_and_prints_nothing_more_hung_in_its_first_collective(incident):
    """Real nccl-tests headers cut after their device lists (as a hang leaves them): one host is
    ENVIRONMENT (peer-to-peer blocked by ACS or the IOMMU), two hosts NETWORK. The whole 2-node
    log prints `Test NCCL failure`: a run that reports its own failure is no silent hang."""
    one_host = (FORMATS / "nccltests_5_old_format_cuda_error" / "all_reduce_perf.txt").read_text().splitlines()[:12]
    two_hosts_full = (FORMATS / "nccltests_219_2node_internal_error" / "all_reduce_perf.txt").read_text().splitlines()
    cases = [(one_host, "ENVIRONMENT"), (two_hosts_full[:7], "NETWORK")]
    for text, category in cases:
        analysis = analyze(incident({"nccl_tests.log": "\n".join(text) + "\n"}))
        stalled = analysis.incident.findings.filter(pl.col("pattern") == "FABRIC004")
        assert stalled["category"].to_list() == [category]
        assert (analysis.verdict.category, analysis.verdict.state) == (category, "hung")
    failed = analyze(incident({"nccl_tests.log": "\n".join(two_hosts_full) + "\n"}))
    assert "FABRIC004" not in failed.incident.findings["pattern"].to_list()
