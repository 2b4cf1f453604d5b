"""Collective step: NCCL and c10d lines, torchrun exits and Flight Recorder dumps -> hang culprits."""

from __future__ import annotations

from forensics.incident import Incident
from forensics.ingest.c10d import COLLECTIVES, parse_collectives, parse_exits
from forensics.ingest.dcgm import parse_dcgm
from forensics.ingest.fabric import parse_fabric
from forensics.ingest.flight_recorder import load_flight_recorder
from forensics.ingest.nccl import parse_nccl
from forensics.ingest.pcie import parse_pcie
from forensics.passes.attribution import (
    attribute_native_runs,
    attribute_ranks,
    attribute_worker_tracebacks,
    fill_hosts,
    known_hosts,
    pid_ranks,
    rank_hosts,
)
from forensics.passes.busy_rank import busy_rank_zero
from forensics.passes.collectives import localize_hang
from forensics.passes.cross_rank import world_size
from forensics.passes.fabric import dcgm_findings, fabric_findings, pcie_findings, stalled_test_runs
from forensics.passes.nccl_chains import explain_chains
from forensics.passes.nccl_ops import op_count_findings
from forensics.passes.nccl_ras import ras_findings
from forensics.passes.network_peers import lost_peer_hosts
from forensics.report.cluster_section import render_cluster
from forensics.report.collectives_section import render_collectives
from forensics.schema import InputKind, empty
from forensics.steps.common import Progress


def ingest_nccl_and_c10d(incident: Incident, progress: Progress) -> None:
    """NCCL topology/warnings, watchdog/collective events, torchrun exits and what the cluster's
    tools printed (nccl-tests, ibstat, lspci, dcgmi), from LINES."""
    if incident.lines.is_empty():
        return
    progress("reading NCCL and c10d messages")
    incident.tables.update(parse_nccl(incident.lines))
    incident.tables["collectives"] = parse_collectives(incident.lines)
    incident.tables["exits"] = parse_exits(incident.lines)
    incident.tables.update(parse_fabric(incident.lines))
    incident.tables.update(parse_pcie(incident.lines))
    incident.tables.update(parse_dcgm(incident.lines))


def ingest_flight_recorder(incident: Incident, progress: Progress) -> None:
    paths = incident.paths_of_kind(InputKind.FLIGHT_RECORDER)
    if paths:
        progress(f"reading {len(paths)} Flight Recorder dumps")
        incident.merge_source(load_flight_recorder(incident.root, paths))


def hang_pass(incident: Incident, progress: Progress) -> None:
    collectives = incident.tables.get("collectives")
    fr_entries = incident.tables.get("fr_entries")
    if (collectives is None or collectives.is_empty()) and (fr_entries is None or fr_entries.is_empty()):
        return
    progress("localizing the collective hang")
    ranks_seen = incident.lines["rank"].drop_nulls().unique().to_list()
    result = localize_hang(
        collectives if collectives is not None else empty(COLLECTIVES),
        fr_entries,
        incident.tables.get("nccl_topology"),
        ranks_seen,
        world_size(incident.lines, incident.findings),
        exits=incident.tables.get("exits"),
        nccl_warns=incident.tables.get("nccl_warns"),
        lines=incident.lines,
        fr_pg_status=incident.tables.get("fr_pg_status"),
    )
    incident.merge_pass(result)


def busy_rank_pass(incident: Incident, progress: Progress) -> None:
    """Rank 0 still preprocessing data while the others timed out waiting for it."""
    incident.add_findings(busy_rank_zero(incident.lines, incident.findings))


def render_collectives_section(incident: Incident) -> str | None:
    return render_collectives(incident.tables) or None


def attribution_pass(incident: Incident, progress: Progress) -> None:
    """Ranks for launcher and kernel lines that name a worker by rank, pid or local rank, for
    CUDA runtime lines printed just before one rank's traceback, and for untagged tracebacks a
    launcher names the worker of; NCCL error-return chains take
    the category of the WARN line that starts them."""
    exits, topology = incident.tables.get("exits"), incident.tables.get("nccl_topology")
    single_node = len(known_hosts(incident.lines, exits, topology)) <= 1
    incident.findings = attribute_ranks(incident.findings, pid_ranks(exits, topology), single_node)
    incident.findings = attribute_native_runs(incident.findings, incident.lines)
    incident.findings = attribute_worker_tracebacks(incident.findings, incident.lines, single_node)
    incident.findings = explain_chains(incident.findings)
    incident.tables["rank_hosts"] = rank_hosts(incident.lines, exits, topology)
    incident.findings = fill_hosts(incident.findings, incident.tables["rank_hosts"])


def fabric_pass(incident: Incident, progress: Progress) -> None:
    """InfiniBand ports that are not Active, PCIe links below what they can run, failed DCGM
    diagnostics, NVLinks down, and the peer host that transport errors on several hosts name,
    as findings on their host."""
    tables = incident.tables
    incident.add_findings(fabric_findings(tables.get("ib_ports")))
    incident.add_findings(stalled_test_runs(tables.get("nccl_test_runs"), incident.lines))
    incident.add_findings(pcie_findings(tables.get("pcie_links")))
    incident.add_findings(dcgm_findings(tables.get("dcgm_diag"), tables.get("nvlink_status")))
    incident.add_findings(lost_peer_hosts(incident.findings, tables.get("nccl_interfaces"), incident.lines))


def render_cluster_section(incident: Incident) -> str | None:
    return render_cluster(incident.tables) or None


def nccl_ras_pass(incident: Incident, progress: Progress) -> None:
    """Ranks an NCCL RAS report finds missing from a communicator or lagging in its operations."""
    incident.add_findings(ras_findings(incident.lines))


def nccl_ops_pass(incident: Incident, progress: Progress) -> None:
    """The process behind in a communicator's NCCL calls, or calling another collective at the same count."""
    incident.add_findings(op_count_findings(incident.tables.get("nccl_ops")))
