"""The host the others lost: transport errors on several hosts that name one peer.

Enters: FINDINGS (NETWORK rows whose captures hold the `peer` an NCCL error names:
`Got completion from peer 10.0.0.4<44206>`, `Connection closed by remote peer 10.0.0.4<...>`,
`Call to recv from 10.0.0.4<...> failed`) and the `nccl_interfaces` frame (the address each
process bootstrapped or opened sockets on: `Bootstrap : Using eth0:10.0.0.4<0>`, `OOB
eth0:10.0.0.4<0>`, `NET/Socket : Using [0]eth0:10.0.0.4<0>`). Leaves: PEER001 findings.

Assumes an address belongs to one host (the host of the processes that use it). A transport
error has two ends and the one that logs it is not the broken one more often than the other;
when processes on at least MIN_REPORTING_HOSTS other hosts lose the same peer host, that
host's NIC, cable or switch port is the common end. PEER001 (NETWORK, critical, initiating,
a host fault) cites the peer host's own NCCL line that shows it owns the address, names the
hosts that lost it in its title and the host as the culprit: the reporters are its victims
(their error lines are their own findings). With one reporting host the two ends stay
undecided and nothing is added.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import FINDINGS, conform, empty

MIN_REPORTING_HOSTS = 2
IPV4 = r"(\d{1,3}(?:\.\d{1,3}){3})"


def address_hosts(interfaces: pl.DataFrame | None) -> pl.DataFrame:
    """IPv4 address -> host, where exactly one host uses the address."""
    if interfaces is None or interfaces.is_empty():
        return pl.DataFrame(schema={"address": pl.String, "peer_host": pl.String})
    pairs = interfaces.select(address=pl.col("interface").str.extract(":" + IPV4 + "$"), peer_host=pl.col("host")).drop_nulls().unique()
    return pairs.filter(pl.len().over("address") == 1)


def lost_peer_hosts(findings: pl.DataFrame, interfaces: pl.DataFrame | None, lines: pl.DataFrame) -> pl.DataFrame:
    """PEER001 per host that errors on MIN_REPORTING_HOSTS other hosts name as their peer."""
    owners = address_hosts(interfaces)
    if findings.is_empty() or owners.is_empty():
        return empty(FINDINGS)
    reports = (
        findings.filter(pl.col("category") == "NETWORK", pl.col("host").is_not_null())
        .with_columns(address=pl.col("captures").str.json_path_match("$.peer").str.extract("^" + IPV4))
        .join(owners, on="address")
        .filter(pl.col("host") != pl.col("peer_host"))
    )
    lost = reports.group_by("peer_host").agg(reporters=pl.col("host").n_unique()).filter(pl.col("reporters") >= MIN_REPORTING_HOSTS)
    if lost.is_empty():
        return empty(FINDINGS)
    summary = (
        reports.join(lost, on="peer_host")
        .group_by("peer_host", "address")
        .agg(pl.col("reporters").first(), hosts=pl.col("host").unique().sort())
    )
    owned = (
        lines.filter(pl.col("host").is_in(summary["peer_host"].implode()), pl.col("text").str.contains("NCCL INFO", literal=True))
        .with_columns(address=pl.col("text").str.extract(":" + IPV4 + "<"))
        .join(summary, left_on=["host", "address"], right_on=["peer_host", "address"])
        .sort("file", "line")
        .unique("host", keep="first", maintain_order=True)
    )
    found = owned.select(
        "file",
        "line",
        "time",
        "text",
        "host",
        pattern=pl.lit("PEER001"),
        title=pl.format(
            "Processes on {} other hosts ({}) lost their connection to {} ({}): its link is the common end",
            "reporters",
            pl.col("hosts").list.join(", "),
            "host",
            "address",
        ),
        category=pl.lit("NETWORK"),
        severity=pl.lit("critical"),
        role=pl.lit("initiating"),
        captures=pl.struct(peer_host="host", address="address", reporting_hosts="hosts").struct.json_encode(),
    )
    return conform(found, FINDINGS)
