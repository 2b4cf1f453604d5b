"""Transport errors on several hosts that name one peer blame that peer's host."""

from __future__ import annotations

from forensics.flow import analyze

# Real NCCL line shapes (NCCL 2.21 init; the IB completion error of NVIDIA/nccl-tests#252),
# on three hosts: node-a owns 10.0.35.1, and node-b and node-c both lose it.
INIT = "{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:{ip}<0>\n"
LOST = (
    "{host}:{pid}:25854 [0] ib_plugin.c:1105 NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> "
    "with error 4, opcode 5327, len 5327, vendor err 81 (Send)\n"
)
HOSTS = {"node-a": ("10.0.35.1", 25146), "node-b": ("10.0.35.2", 31002), "node-c": ("10.0.35.3", 40417)}


def _incident(tmp_path, reporters):
    for rank, (host, (ip, pid)) in enumerate(HOSTS.items()):
        text = INIT.format(host=host, pid=pid, ip=ip)
        if host in reporters:
            text += LOST.format(host=host, pid=pid)
        (tmp_path / f"rank{rank}.log").write_text(text)
    return analyze(tmp_path)


def test_the_host_that_two_others_lost_is_the_culprit_not_the_reporters(tmp_path):
    analysis = _incident(tmp_path, {"node-b", "node-c"})
    verdict = analysis.verdict
    assert (verdict.category, verdict.culprit_hosts, verdict.culprit_ranks) == ("NETWORK", ["node-a"], [])
    peer = analysis.incident.findings.filter(analysis.incident.findings["pattern"] == "PEER001").row(0, named=True)
    assert peer["host"] == "node-a" and "node-b, node-c" in peer["title"] and "10.0.35.1" in peer["title"]
    assert peer["text"] == "node-a:25146:25146 [0] NCCL INFO Bootstrap : Using eth0:10.0.35.1<0>"  # the line that shows it owns the address


def test_one_reporting_host_leaves_the_two_ends_undecided(tmp_path):
    analysis = _incident(tmp_path, {"node-b"})
    assert "PEER001" not in analysis.incident.findings["pattern"].to_list()
    assert analysis.verdict.culprit_hosts == ["node-b"]
