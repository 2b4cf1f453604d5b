"""discover: every file listed, kinds by content first, ranks from names, links never followed."""

from __future__ import annotations

import gzip
import json
import os
import pickle

import polars as pl
import pytest

from forensics.discover import discover, rank_from_name, sniff_kind
from forensics.schema import InputKind

NVSMI = (
    "\n==============NVSMI LOG==============\n\n"
    "Timestamp                                              : Tue Jul 14 08:12:53 2026\n"
    "Driver Version                                         : 590.48.01\n"
    "CUDA Version                                           : 13.1\n\n"
    "Attached GPUs                                          : 1\n"
    "GPU 00000000:00:09.0\n"
    "    Product Name                                       : NVIDIA H100 80GB HBM3\n"
)
QUERY_CSV = (
    "timestamp, gpu_name, gpu_bus_id, gpu_serial, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
    "2026/07/14 08:12:53.500, NVIDIA H100 80GB HBM3, 00000000:00:09.0, 0000000000000, GPU-00000000-0000-0000-0000-000000000000, 11345, ./gpu_burn, 15690 MiB\n"
)
QUERY_CSV_OLD = (
    "index, name, pci.bus_id, temperature.gpu, utilization.gpu [%], memory.used [MiB]\n"
    "0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 34, 0 %, 0 MiB\n"
)
DMON = (
    "# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk \n"
    "# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz \n"
    "    0    631     63     57    100     10      0      0      0      0   2619   1980 \n"
)
TOPO = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-19\t0\t\tN/A\n"
DMESG = "".join(
    f"[31543.44944{i}] NVRM: Xid (PCI:0000:01:00): 31, Ch 0000003a, intr 10000000. MMU Fault: ENGINE GRAPHICS\n" for i in range(5)
)
NCCL_DEBUG = (
    "host-2:38610:38610 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to enp179s0f0\n"
    "host-2:38610:38610 [0] NCCL INFO NCCL version 2.18.3+cuda12.2\n"
    "host-2:38610:38610 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB enp179s0f0:198.18.2.2<0>\n"
    "host-2:38610:38610 [0] NCCL INFO comm 0x1277bf60 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 65000 commId 0xbd10cc2bcb56e132 - Init START\n"
)
TRACE = json.dumps({"schemaVersion": 1, "deviceProperties": [], "distributedInfo": {"rank": 2}, "traceEvents": [{"ph": "X", "name": "k"}]})
ERROR_JSON = json.dumps(
    {"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1717000000"}}}
)


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("rank_2.pt.trace.json", TRACE, InputKind.TRACE),
        ("host_123.1717000000.pt.trace.json.gz", gzip.compress(TRACE.encode()), InputKind.TRACE),
        ("profile.txt", TRACE, InputKind.TRACE),  # content, not the suffix, decides
        ("smi.txt", NVSMI, InputKind.NVIDIA_SMI_QUERY),
        ("gpus.csv", QUERY_CSV, InputKind.NVIDIA_SMI_CSV),
        ("query.out", QUERY_CSV_OLD, InputKind.NVIDIA_SMI_CSV),
        ("dmon.log", DMON, InputKind.NVIDIA_SMI_DMON),
        ("topo.txt", TOPO, InputKind.NVIDIA_SMI_TOPO),
        ("host.txt", DMESG, InputKind.KERNEL_LOG),
        ("dmesg", "no timestamps here but the name says kernel log\n", InputKind.KERNEL_LOG),
        ("node1.nccl.txt", NCCL_DEBUG, InputKind.NCCL_LOG),
        ("nccl_trace_rank_3", pickle.dumps({"version": "2.3", "pg_config": {}, "entries": []}, protocol=2), InputKind.FLIGHT_RECORDER),
        ("fr_dump_1.json", json.dumps({"version": "2.3", "pg_config": {}, "entries": []}), InputKind.FLIGHT_RECORDER),
        ("error.json", ERROR_JSON, InputKind.ERROR_FILE),
        ("README.md", "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n", InputKind.CONSOLE_LOG),
        ("rank_3.log", "[rank3]: hello\n", InputKind.RANK_LOG),
        ("console.log", "[rank0]: hello\n[rank1]: hello\n", InputKind.CONSOLE_LOG),
    ],
)
def test_kind_by_content_sniffing(tmp_path, name, content, kind):
    (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    row = discover(tmp_path).row(0, named=True)
    assert row["kind"] == kind
    assert row["status"] is None


def test_fixture_metadata_is_skipped_only_inside_the_project_s_fixtures(tmp_path):
    from forensics.discover import FIXTURES

    inside = discover(FIXTURES / "incidents" / "healthy").filter(pl.col("path") == "expected.json")
    assert inside.select("kind", "problem").rows() == [(InputKind.METADATA, "fixture metadata, not evidence")]
    (tmp_path / "expected.json").write_text('{"category": "CUDA_OOM"}')
    assert discover(tmp_path)["kind"].to_list() != [InputKind.METADATA]


def test_pickle_without_a_flight_recorder_name_is_not_read_as_one(tmp_path):
    (tmp_path / "model.pkl").write_bytes(pickle.dumps({"entries": []}, protocol=4))
    row = discover(tmp_path).row(0, named=True)
    assert row["kind"] == InputKind.UNKNOWN
    assert (row["status"], row["problem"]) == ("skipped", "binary content")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("rank_3.log", (3, None)),
        ("rank3.log", (3, None)),
        ("train_rank3.log", (3, None)),
        ("worker-3.log", (3, None)),
        ("node2_rank12.err", (12, None)),
        ("log_rank_07.out", (7, None)),
        ("traces/rank-0.json.gz", (0, None)),
        ("logs/attempt_0/3/stderr.log", (None, 3)),
        ("run/abc/attempt_2/7/stdout.log", (None, 7)),
        ("console.log", (None, None)),
        ("ranking.log", (None, None)),
        ("frank_3.log", (None, None)),
    ],
)
def test_rank_from_name(path, expected):
    assert rank_from_name(path) == expected


def test_every_file_is_listed_with_relative_paths(tmp_path):
    (tmp_path / "logs" / "attempt_0" / "3").mkdir(parents=True)
    (tmp_path / "logs" / "attempt_0" / "3" / "stderr.log").write_text("[default3]:[rank3]: x\n")
    (tmp_path / "rank_1.log").write_text("x\n")
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "junk.bin").write_bytes(os.urandom(4096) + b"\x00")
    inputs = discover(tmp_path)
    assert inputs["path"].to_list() == ["empty.log", "junk.bin", "logs/attempt_0/3/stderr.log", "rank_1.log"]
    by_path = {r["path"]: r for r in inputs.iter_rows(named=True)}
    assert by_path["empty.log"]["status"] == "skipped" and by_path["empty.log"]["bytes"] == 0
    assert by_path["junk.bin"]["problem"] == "binary content"
    assert by_path["rank_1.log"]["rank"] == 1 and by_path["rank_1.log"]["bytes"] == 2


def test_symlinks_are_listed_as_skipped_and_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("[rank0]: not part of the incident\n")
    root = tmp_path / "incident"
    root.mkdir()
    (root / "rank_0.log").write_text("[rank0]: hi\n")
    os.symlink(outside / "secret.log", root / "rank_1.log")
    os.symlink(outside, root / "more_logs")
    os.symlink(root / "missing", root / "dangling.log")
    inputs = {r["path"]: r for r in discover(root).iter_rows(named=True)}
    assert set(inputs) == {"rank_0.log", "rank_1.log", "more_logs", "dangling.log"}
    assert inputs["rank_1.log"]["problem"] == "symbolic link (not followed)"
    assert inputs["more_logs"]["problem"] == "symbolic link to a directory (not followed)"
    assert inputs["dangling.log"]["status"] == "skipped"
    assert all(inputs[p]["bytes"] is None for p in ("rank_1.log", "more_logs", "dangling.log"))


def test_fifo_is_listed_not_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.log")  # opening it would block forever
    row = discover(tmp_path).row(0, named=True)
    assert (row["path"], row["status"], row["problem"]) == ("pipe.log", "skipped", "not a regular file")


def test_a_file_swapped_for_a_fifo_or_a_link_after_discovery_is_unreadable_not_a_hang(tmp_path, monkeypatch):
    import threading

    from forensics import flow

    real_discover = flow.discover
    root = tmp_path / "incident"
    root.mkdir()
    (root / "rank_0.log").write_text("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    (root / "rank_1.log").write_text("step 1 loss 2.0\n")
    (root / "rank_2.log").write_text("step 1 loss 2.1\n")
    (tmp_path / "secret").write_text("outside the incident\n")

    def discover_then_swap(root, only=None):
        inputs = real_discover(root, only)
        (root / "rank_0.log").unlink()
        os.mkfifo(root / "rank_0.log")  # a plain open() would wait forever for a writer
        (root / "rank_1.log").unlink()
        (root / "rank_1.log").symlink_to(tmp_path / "secret")
        return inputs

    monkeypatch.setattr(flow, "discover", discover_then_swap)
    result = {}
    worker = threading.Thread(target=lambda: result.update(analysis=flow.analyze(root)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "reading a FIFO swapped in after discovery blocked"
    incident = result["analysis"].incident
    inputs = {row["path"]: row for row in incident.inputs.iter_rows(named=True)}
    assert inputs["rank_0.log"]["status"] != "parsed" and "not a regular file" in inputs["rank_0.log"]["problem"]
    assert inputs["rank_1.log"]["status"] != "parsed"
    assert incident.lines["text"].to_list() == ["step 1 loss 2.1"]


def test_a_git_folder_is_listed_once_unread_and_other_dot_folders_are_read(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "rank_1.log").write_text("x\n")
    (tmp_path / "rank_0.log").write_text("x\n")
    inputs = discover(tmp_path)
    assert inputs.select("path", "problem").rows() == [
        (".git/", "version-control folder: not read"),
        (".github/rank_1.log", None),
        ("rank_0.log", None),
    ]


def test_deep_tree_does_not_exhaust_the_stack(tmp_path):
    # Deeper than Python's recursion limit. Built and removed level by level: mkdir(parents=True)
    # and shutil.rmtree (pytest's tmp cleanup) recurse too.
    levels = [tmp_path]
    for _ in range(1100):
        levels.append(levels[-1] / "d")
        levels[-1].mkdir()
    (levels[-1] / "rank_4.log").write_text("[rank4]: deep\n")
    try:
        (row,) = discover(tmp_path).iter_rows(named=True)
        assert row["path"].endswith("d/rank_4.log") and row["rank"] == 4 and row["kind"] == "rank_log"
    finally:
        (levels[-1] / "rank_4.log").unlink()
        for level in reversed(levels[1:]):
            level.rmdir()


def test_empty_folder_gives_an_empty_table(tmp_path):
    assert discover(tmp_path).is_empty()


def test_sniff_never_raises_on_garbage():
    for head in [b"{", b'{"traceEvents"', b"\x80\x04", b"\xff" * 100, b"[", b"\n\n\n"]:
        kind, _ = sniff_kind("x.json", head)
        assert kind in set(InputKind)
