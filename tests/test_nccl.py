"""NCCL debug output: header fields, topology, versions, transports, WARN classes (formats.md 1)."""

from __future__ import annotations

import polars as pl
import pytest

from forensics.ingest.nccl import parse_nccl, process_ranks
from forensics.schema import LINES, conform

# Real lines from formats.md §1.3-1.4 (launcher prefixes included where they were).
REAL = [
    "4c217144f0b1:113168:113168 [0] NCCL INFO Bootstrap : Using eth0:10.0.1.9<0>",
    "NCCL version 2.13.4+cuda11.7",
    "4c217144f0b1:113168:113179 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB eth0:10.0.1.9<0>",
    "4c217144f0b1:113168:113179 [0] NCCL INFO Using network IB",
    "host-2:38610:38610 [0] NCCL INFO NCCL version 2.18.3+cuda12.2",
    "host-2:38610:38610 [0] NCCL INFO comm 0x1277bf60 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 65000 commId 0xbd10cc2bcb56e132 - Init START",
    "hostname-test:984:1257 [4] NCCL INFO comm 0x557fe785f7a0 rank 36 nranks 64 cudaDev 4 nvmlDev 4 busId 9b000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE",
    "kolyoz2:25146:25827 [0] NCCL INFO ncclCommInitRank comm 0x559d5aa8ca00 rank 4 nranks 8 cudaDev 0 nvmlDev 0 busId 42000 commId 0x996ee6f117cb8e1e - Init START",
    "A03-R28-I49-3-9000018:193027:193119 [7] NCCL INFO comm 0x7fdf08000d00 rank 15 nranks 16 cudaDev 7 busId e7000 - Init COMPLETE",
    "iv-ycjau2qiy0f80nh6awou:180458:180805 [1] NCCL INFO Channel 01/0 : 1[c5000] -> 0[29000] via P2P/IPC/read",
    "[2] node0:13572:13572 [1] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct",
    "[0] node0:13571:13571 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
    "hostname-test:983:1261 [3] NCCL INFO Connected NVLS tree",
    "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00:1148:9000:5000:4:200:3:ff22 remoteGidsfd00:1148:9000:5000:4:200:3:ff1f",
    "kp-ddp-worker-0:3468:3905 [4] NCCL INFO transport/net.cc:1302 -> 6",
    "[2026-03-03 12:11:38] tpgds-aihub0007:185303:186751 [1] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer 10.99.91.63<51161> with status=4 opcode=32614 len=32614 vendor err 81 (Send) localGid ::ffff:10.99.92.59 remoteGids::ffff:10.99.91.63 hca mlx5_1",
    "gpu004:2200689:2200706 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer gpu004.ds-a4-r02.abc.com<55693>",
    "gpu004:2200689:2200706 [3] proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId=0x7f4774cc9620",
    "gcn6:1080061:1080359 [0] misc/nvmlwrap.cc:181 NCCL WARN nvmlDeviceGetHandleByPciBusId() failed: Not Found",
    "Fri Aug 11 12:31:45 2023[1,0]<stdout>:tomte401:1850301:1881341 [0] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'",
    "[rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.",
]


def lines_of(texts: list[str], file: str = "console.log", rank: int | None = None) -> pl.DataFrame:
    return conform(pl.DataFrame({"file": file, "line": range(1, len(texts) + 1), "text": texts, "rank": rank}), LINES)


@pytest.fixture(scope="module")
def parsed():
    return parse_nccl(lines_of(REAL))


def test_every_nccl_line_and_only_those(parsed):
    records = parsed["nccl_lines"]
    assert records.height == len(REAL) - 1  # the watchdog line mentions ProcessGroupNCCL, not an NCCL record
    levels = dict(zip(records["line"].to_list(), records["level"].to_list()))
    assert levels[1] == "INFO" and levels[2] == "VERSION" and levels[14] == "WARN"
    prefixed = records.filter(pl.col("line") == 20).row(0, named=True)
    assert (prefixed["host"], prefixed["pid"], prefixed["tid"], prefixed["cuda_dev"]) == ("tomte401", 1850301, 1881341, 0)
    assert prefixed["src"] == "transport.cc:154"
    stamped = records.filter(pl.col("line") == 16).row(0, named=True)
    assert str(stamped["ts"]) == "2026-03-03 12:11:38+00:00"


def test_topology_all_generations(parsed):
    topo = parsed["nccl_topology"].sort("line")
    assert topo["rank"].to_list() == [0, 36, 4, 15]
    assert topo["nranks"].to_list() == [1, 64, 8, 16]
    assert topo["pci_bus_id"].to_list() == ["00000000:65:00.0", "00000000:9B:00.0", "00000000:42:00.0", "00000000:E7:00.0"]
    assert topo["nvml_dev"].to_list() == [0, 4, 0, None]  # <= 2.17 prints no nvmlDev
    assert topo["comm_id"].to_list()[3] is None  # <= 2.14 prints no commId
    assert topo["phase"].to_list() == ["START", "COMPLETE", "START", "COMPLETE"]


def test_complete_wins_over_start_and_largest_comm_gives_the_global_rank():
    head = "nodeA:4107:4170 [2] NCCL INFO"
    texts = [
        f"{head} comm 0x55aa rank 10 nranks 16 cudaDev 2 nvmlDev 2 busId 3a000 commId 0x11 - Init START",
        f"{head} comm 0x55aa rank 10 nranks 16 cudaDev 2 nvmlDev 2 busId 3a000 commId 0x11 - Init COMPLETE",
        f"{head} ncclCommSplit comm 0x77bb rank 2 nranks 8 cudaDev 2 nvmlDev 2 busId 3a000 commId 0x22 parent 0x55aa splitCount 1 color 1 key 2 - Init COMPLETE",
    ]
    topo = parse_nccl(lines_of(texts))["nccl_topology"]
    assert topo.height == 2 and set(topo["phase"]) == {"COMPLETE"}
    procs = process_ranks(topo)
    assert procs.row(0, named=True) == {
        "host": "nodeA",
        "pid": 4107,
        "global_rank": 10,
        "world": 16,
        "cuda_dev": 2,
        "pci_bus_id": "00000000:3A:00.0",
    }


def test_versions(parsed):
    versions = parsed["nccl_versions"].sort("line")
    assert versions.select("nccl_version", "cuda_version").rows() == [("2.13.4", "11.7"), ("2.18.3", "12.2")]
    assert versions["host"].to_list()[1] == "host-2"


def test_transports_and_interfaces(parsed):
    transports = set(parsed["nccl_transports"]["transport"].to_list())
    assert transports == {"NET/IB", "P2P/IPC", "SHM", "NET/Socket", "NVLS"}
    interfaces = parsed["nccl_interfaces"]
    assert interfaces.filter(pl.col("kind") == "ib")["interface"].to_list() == [f"mlx5_{i}:1/IB" for i in range(4)]
    assert "eth0:10.0.1.9" in interfaces.filter(pl.col("kind") == "bootstrap")["interface"].to_list()


CONFIGURED = [  # public nccl-tests and training logs: environment overrides and the channels NCCL built
    "tpgds-aihub0007:196837:196837 [7] NCCL INFO NCCL_PROTO set by environment to Simple",
    "tpgds-aihub0007:196837:196837 [7] NCCL INFO NCCL_ALGO set by environment to Ring",
    "tpgds-aihub0007:196837:196837 [7] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 1 p2p channels per peer",
    "gpu-dev-dc07a789:1799:1799 [3] NCCL INFO NCCL_ALGO set by environment to ring,tree",
    "gpu-dev-dc07a789:1799:1799 [3] NCCL INFO 24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
    "host-2:38610:38610 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to enp179s0f0",
    "4c217144f0b1:113168:113179 [0] NCCL INFO Using network IB",
]


def test_configuration_per_process_with_the_line_that_set_it():
    config = parse_nccl(lines_of(CONFIGURED))["nccl_config"]
    got = {(row["host"], row["key"]): (row["value"], row["line"]) for row in config.iter_rows(named=True)}
    assert got == {
        ("tpgds-aihub0007", "NCCL_PROTO"): ("Simple", 1),
        ("tpgds-aihub0007", "NCCL_ALGO"): ("Ring", 2),
        ("tpgds-aihub0007", "coll channels"): ("4", 3),
        ("tpgds-aihub0007", "nvls channels"): ("0", 3),
        ("tpgds-aihub0007", "p2p channels"): ("4", 3),
        ("gpu-dev-dc07a789", "NCCL_ALGO"): ("ring,tree", 4),
        ("gpu-dev-dc07a789", "coll channels"): ("24", 5),
        ("gpu-dev-dc07a789", "nvls channels"): ("16", 5),
        ("gpu-dev-dc07a789", "p2p channels"): ("32", 5),
        ("host-2", "NCCL_SOCKET_IFNAME"): ("enp179s0f0", 6),
        ("4c217144f0b1", "network"): ("IB", 7),
    }


def test_gdrdma_counts_as_a_transport():
    text = "hgx-001:30117:30178 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"
    assert set(parse_nccl(lines_of([text]))["nccl_transports"]["transport"]) == {"NET/IB", "GDRDMA"}


def test_warn_classes(parsed):
    warns = parsed["nccl_warns"].sort("line")
    assert warns["kind"].to_list() == ["ib_completion", "ib_completion", "remote_exited", "socket", "system_error", "cuda_failure"]
    first = warns.row(0, named=True)
    assert (first["ib_status"], first["vendor_err"], first["peer"]) == ("12", 129, "10.216.210.236")
    assert warns.row(1, named=True)["time"] is not None  # NCCL >= 2.26 WARN timestamp


@pytest.mark.parametrize(
    "msg, kind",
    [
        (
            "NET/IB: Got completion from peer 10.1.1.2<3> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_0",
            "ib_completion",
        ),
        ("NET/IB : mlx5_0:1 async fatal event: local catastrophic error", "ib_async"),
        ("Mismatched NCCL version detected : rank 0 version 22105 rank 3 version 21903", "version_mismatch"),
        ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000", "duplicate_gpu"),
        ("Error while creating shared memory segment /dev/shm/nccl-5Qh1x9 (size 9637888)", "shm"),
        ("socketProgressOpt: Call to recv from 10.0.0.3<45321> failed : Connection reset by peer", "socket"),
        ("Cuda failure 2 'out of memory'", "cuda_failure"),
        ("some brand new message", "other"),
    ],
)
def test_warn_classification_by_message(msg, kind):
    text = f"node7:9001:9044 [5] transport/net_ib.cc:1 NCCL WARN {msg}"
    warns = parse_nccl(lines_of([text]))["nccl_warns"]
    assert warns["kind"].to_list() == [kind]


def test_warn_rank_comes_from_the_topology_not_the_file():
    init = "nodeB:7001:7060 [3] NCCL INFO comm 0x1 rank 11 nranks 16 cudaDev 3 nvmlDev 3 busId 5d000 commId 0x9 - Init COMPLETE"
    warn = "nodeB:7001:7400 [3] misc/socket.cc:49 NCCL WARN socketProgress: Call to recv from 10.0.0.3<1> failed : Broken pipe"
    lines = pl.concat([lines_of([init], "rank_11.log", 11), lines_of([warn], "nccl_nodeB_7001.log", None)])
    warns = parse_nccl(lines)["nccl_warns"]
    assert warns.select("rank", "host", "file").row(0) == (11, "nodeB", "nccl_nodeB_7001.log")


def test_empty_and_unrelated_input():
    assert all(f.is_empty() for f in parse_nccl(lines_of([])).values())
    frames = parse_nccl(lines_of(["just a line", "\x00\x01 binary junk NCCL", "NCCL INFO"]))
    assert frames["nccl_topology"].is_empty() and frames["nccl_warns"].is_empty()
