"""GPU board serials: read from every nvidia-smi form, carried to the findings, the verdict and the fleet."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.batch.fleet import index_frame, render_fleet
from forensics.batch.lemons import serial_blame
from forensics.flow import analyze
from forensics.ingest.gpu import GPU_SAMPLES
from forensics.ingest.smi_csv import parse_gpu_csv
from forensics.ingest.smi_query import parse_nvidia_smi_query, parse_nvidia_smi_xml
from forensics.passes.gpu_identity import with_gpu_serials
from forensics.schema import FINDINGS, conform

ROOT = Path(__file__).resolve().parents[1]
H100_Q = ROOT / "fixtures/incidents/gpu_illegal_memory_access/nvidia-smi-q.txt"  # captured on an H100 (its NOTE.md)
H100_XML = ROOT / "fixtures/formats/smi_nvidia_h100_80gb_hbm3_q_x.xml"
ANONYMIZED_Q = ROOT / "fixtures/incidents/hw_ecc_uncorrectable/nvidia-smi-q-gpu1.txt"  # serial written as zeros


def test_every_nvidia_smi_form_gives_the_board_serial_and_zeros_or_na_give_none():
    q, _ = parse_nvidia_smi_query(H100_Q.read_text(), "q.txt")
    xml, _ = parse_nvidia_smi_xml(H100_XML.read_text(), "q.xml")
    zeros, _ = parse_nvidia_smi_query(ANONYMIZED_Q.read_text(), "q1.txt")
    csv, _ = parse_gpu_csv(
        "index, pci.bus_id, serial, temperature.gpu\n0, 00000000:18:00.0, 1321621045678, 41\n1, 00000000:2A:00.0, [N/A], 40\n",
        "smi.csv",
    )
    assert q.select("pci_bus_id", "serial").rows() == [("00000000:00:06.0", "1753024018912")]
    assert xml.select("pci_bus_id", "serial").rows() == [("00000000:00:06.0", "1753024018912")]
    assert zeros["serial"].to_list() == [None]
    assert csv["serial"].to_list() == ["1321621045678", None]


def _samples(*rows: tuple[str | None, str, str]) -> pl.DataFrame:
    return conform(pl.DataFrame(rows, schema=["host", "pci_bus_id", "serial"], orient="row"), GPU_SAMPLES)


def _findings(*rows: tuple[str | None, str | None]) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=["host", "pci_bus_id"], orient="row").with_columns(
        pattern=pl.lit("GPU-XID79"), line=pl.int_range(pl.len())
    )
    return conform(frame, FINDINGS)


def test_a_finding_gets_the_serial_its_bus_id_names_on_its_host_and_none_when_that_is_ambiguous():
    samples = _samples(
        ("node-a", "00000000:18:00.0", "SN-A18"),
        ("node-b", "00000000:18:00.0", "SN-B18"),
        (None, "00000000:2A:00.0", "SN-2A"),  # a dump without a host name
    )
    findings = _findings(
        ("node-b", "00000000:18:00.0"),  # exact host
        (None, "00000000:18:00.0"),  # no host, and two boards sit at that bus id
        ("node-c", "00000000:2A:00.0"),  # only the hostless dump names this bus id
        ("node-c", "00000000:18:00.0"),  # neither dump is of node-c
        ("node-a", None),
    )
    assert with_gpu_serials(findings, samples)["gpu_serial"].to_list() == ["SN-B18", None, "SN-2A", None, None]
    assert with_gpu_serials(findings, None).equals(findings)


def test_the_verdict_names_the_culprit_gpu_by_its_serial():
    verdict = analyze(H100_Q.parent).verdict
    assert verdict.category == "CUDA_ERROR"
    assert {"pci_bus_id": "00000000:00:06.0", "serial": "1753024018912"}.items() <= verdict.culprit_gpus[0].items()


def test_a_board_blamed_twice_in_two_hosts_is_one_lemon_board_in_fleet_md():
    def row(n: int, place: str, serial: str | None) -> dict:
        return {
            "id": f"job-{n}", "path": f"/a/job-{n}", "category": "HARDWARE", "state": "crashed", "confidence": 0.9,
            "culprit_hosts": [place.split(":")[0]], "culprit_gpus": [place], "culprit_gpu_serials": [serial],
            "hosts": [place.split(":")[0]], "start": "2025-03-0{n}T02:00:00Z".replace("{n}", str(n + 1)),
        }  # fmt: skip

    index = index_frame(
        [row(0, "node-3:00000000:18:00.0", "SN-7"), row(1, "node-9:00000000:2A:00.0", "SN-7"), row(2, "node-4:00000000:18:00.0", None)]
    )
    blamed = serial_blame(index)
    assert blamed.select("serial", "blamed").rows() == [("SN-7", 2)]
    assert blamed["places"].to_list() == [["node-3:00000000:18:00.0", "node-9:00000000:2A:00.0"]]
    fleet = render_fleet(index)
    assert "## GPU boards that keep failing" in fleet
    board = next(line for line in fleet.splitlines() if line.startswith("| SN-7 |"))
    assert "node-3:00000000:18:00.0, node-9:00000000:2A:00.0" in board and "job-0, job-1" in board
