"""c10d watchdog / desync / heartbeat lines and torchrun exit records (formats.md 2, 4)."""

from __future__ import annotations

import polars as pl
import pytest

from forensics.ingest.c10d import parse_collectives, parse_exits
from forensics.schema import LINES, conform

PG_25 = "[PG ID 0 PG GUID 0(default_pg) Rank 0]"
DUMP_TAIL = "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks."

# torch ~2.7, verbatim from formats.md §2.2 (one rank's full timeout record).
TORCH_27 = [
    "[rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.",
    f"[rank0]:[E709 17:05:38.162814866 ProcessGroupNCCL.cpp:2271] {PG_25}  failure detected by watchdog at work sequence id: 20585 PG status: last enqueued work: 20589, last completed work: 20584",
    f"[rank0]:[E709 17:05:38.482119928 ProcessGroupNCCL.cpp:1746] {PG_25} Received a dump signal due to a collective timeout from this local rank and we will try our best to dump the debug info. Last enqueued NCCL work: 20589, last completed NCCL work: 20584.{DUMP_TAIL}",
    f"[rank0]:[E709 17:05:39.083402482 ProcessGroupNCCL.cpp:1899] {PG_25} Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.",
    f"[rank0]:  what():  {PG_25} Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600000 milliseconds before timing out.",
]


def lines_of(texts: list[str], file: str = "rank.log", rank: int | None = None, blocks: dict[int, int] | None = None) -> pl.DataFrame:
    """A LINES frame; rank from a `[rankN]:` prefix else `rank`; block = own line unless given."""
    n = len(texts)
    frame = pl.DataFrame({"file": file, "line": range(1, n + 1), "text": texts}, schema_overrides={"text": pl.String}).with_columns(
        rank=pl.coalesce(pl.col("text").str.extract(r"^\[rank(\d+)\]:").cast(pl.Int32), pl.lit(rank, pl.Int32)),
        block=pl.col("line").replace(blocks or {}),
    )
    return conform(frame, LINES)


def test_one_timeout_logged_three_times_is_one_row_per_kind():
    rows = parse_collectives(lines_of(TORCH_27))
    assert rows["kind"].to_list() == ["watchdog_timeout", "failure_detected", "dump_signal", "watchdog_terminated"]
    timeout = rows.row(0, named=True)
    assert (timeout["seq"], timeout["op_type"], timeout["numel_in"], timeout["timeout_ms"], timeout["ran_for_ms"]) == (
        20585,
        "ALLREDUCE",
        1259621,
        600000,
        600000,
    )
    # The `Watchdog caught` line names only [Rank 0]; its PG comes from the same rank's line about seq 20585.
    assert (timeout["pg_guid"], timeout["pg_desc"], timeout["pg_rank"], timeout["rank"]) == ("0", "default_pg", 0, 0)
    detected = rows.row(1, named=True)
    assert (detected["last_enqueued"], detected["last_completed"], detected["pg_id"]) == (20589, 20584, 0)
    assert rows.row(2, named=True)["detail"] == "this local rank"


@pytest.mark.parametrize(
    "text, expected",
    [
        (  # <= 2.0: no timestamp, no Numel, no global-rank prefix
            "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.",
            {
                "kind": "watchdog_timeout",
                "seq": 469508,
                "numel_in": None,
                "timeout_ms": 1800000,
                "ran_for_ms": 1802212,
                "pg_rank": 1,
                "rank": 7,
            },
        ),
        (  # ~2.4: `[PG 1 Rank 0]`
            "[rank0]:[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.",
            {"kind": "failure_detected", "seq": 7753, "last_enqueued": 7755, "last_completed": 7752, "pg_guid": "1", "rank": 0},
        ),
        (  # ~2.5: PG ID / GUID with description
            "[rank1]:[E626 06:24:44.906457629 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 808, last enqueued NCCL work: 811, last completed NCCL work: 807.",
            {
                "kind": "failure_detected",
                "seq": 808,
                "last_enqueued": 811,
                "last_completed": 807,
                "pg_guid": "0",
                "pg_desc": "default_pg",
                "pg_id": 0,
            },
        ),
        (  # `[PG name (desc) Rank r]`
            "[rank5]:[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 3 (tp_group) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 12, last enqueued NCCL work: 12, last completed NCCL work: 11.",
            {"pg_guid": "3", "pg_desc": "tp_group", "pg_rank": 1, "rank": 5},
        ),
        (
            "rank0]:[E416 04:50:37.808620443 ProcessGroupNCCL.cpp:1484] [PG ID 2 PG GUID 3 Rank 0] ProcessGroupNCCL's watchdog got stuck for 300 seconds without making progress in monitoring enqueued collectives.",
            {"kind": "heartbeat_stuck", "pg_guid": "3", "pg_id": 2, "detail": "300 seconds"},
        ),
        (
            "[rank7]:[E710 18:00:32.686716232 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID 0(default_pg) Rank 7] Received a dump signal due to a collective timeout from  rank 3 and we will try our best to dump the debug info. Last enqueued NCCL work: 59957, last completed NCCL work: 59957.",
            {"kind": "dump_signal", "ranks_named": [3], "last_enqueued": 59957, "last_completed": 59957, "detail": "rank 3"},
        ),
        (
            "[rank3]:[F710 18:08:32.707469047 ProcessGroupNCCL.cpp:1725] [PG ID 0 PG GUID 0(default_pg) Rank 3] [PG ID 0 PG GUID 0(default_pg) Rank 3] Terminating the process after attempting to dump debug info, due to collective timeout or exception.",
            {"kind": "terminating", "detail": "collective timeout or exception"},
        ),
        (
            "[rank2]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete",
            {"kind": "gloo_timeout", "timeout_ms": 10000, "detail": "recv", "rank": 2},
        ),
        (
            "[Rank 4] Collective WorkNCCL(SeqNum=11, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) raised the following async exception: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.25.1",
            {"kind": "nccl_error", "seq": 11, "detail": "unhandled system error (run with NCCL_DEBUG=INFO for details)"},
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
            {"kind": "nccl_error", "detail": "unhandled system error (run with NCCL_DEBUG=INFO for details)"},
        ),
        (
            "[Rank 0] Work WorkNCCL(SeqNum=5, OpType=BARRIER, NumelIn=1, NumelOut=1, Timeout(ms)=60000) timed out in blocking wait.",
            {"kind": "blocking_wait_timeout", "seq": 5, "op_type": "BARRIER", "timeout_ms": 60000},
        ),
    ],
)
def test_versions_and_kinds(text, expected):
    rows = parse_collectives(lines_of([text], rank=7))
    assert rows.height == 1
    got = rows.row(0, named=True)
    assert {k: got[k] for k in expected} == expected


def test_desync_report_lines_inherit_the_rank_and_seq_of_their_record():
    texts = [
        "[rank2]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
        "\t - [2] Timeout at collective: _REDUCE_SCATTER_BASE, #7753",
        "\t - To our best knowledge, ranks [4, 9] are the lagging ranks that caused this timeout. They never joined any collectives",
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
        "\t   - [5, 6] joined but didn't finish collective #7753 (count from 1)",
        "\t     [1] finished collective #7752, but didn't join collective #7753 (count from 1)",
        "\t - Snapshot of ranks' latest states:",
        "\t   #7753 started ranks:",
        "\t     [0, 2, 3] started _REDUCE_SCATTER_BASE",
        "\t     [7] started ALLGATHER",
    ]
    rows = parse_collectives(lines_of(texts, blocks={i: 1 for i in range(2, 11)}))
    report = rows.filter(pl.col("kind") == "desync_report")
    assert report["rank"].unique().to_list() == [2]
    assert report["seq"].unique().to_list() == [7753]
    assert report.select("detail", "ranks_named").rows() == [
        ("timeout_at", None),
        ("never_joined", [4, 9]),
        ("joined_not_finished", [5, 6]),
        ("finished_not_joined", [1]),
        ("started", [0, 2, 3]),
        ("started", [7]),
    ]
    assert report.filter(pl.col("ranks_named") == [7])["op_type"].to_list() == ["ALLGATHER"]


def test_no_candidates_no_rows():
    assert parse_collectives(lines_of(["step 10 | loss 2.1", "NCCL INFO Using network IB"])).is_empty()
    assert parse_collectives(lines_of([])).is_empty()


TABLE = [
    "E0709 17:05:39.816000 56204 site-packages/torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) local_rank: 0 (pid: 56213) of binary: /opt/conda/bin/python3.10",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "=" * 60,
    "trainer.py FAILED",
    "-" * 60,
    "Failures:",
    "[1]:",
    "  time      : 2025-07-09_17:05:40",
    "  host      : distributed-training.us-central1-a.c.lance-dev-ayush.internal",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -9 (pid: 56214)",
    "  error_file: /tmp/torchelastic_x/attempt_0/1/error.json",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "-" * 60,
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-07-09_17:05:39",
    "  host      : distributed-training.us-central1-a.c.lance-dev-ayush.internal",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -6 (pid: 56213)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 56213",
    "=" * 60,
    "[2024-05-08 08:47:31,877] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 2 (pid: 5939) of binary: /home/ubuntu/anaconda3/envs/salience_detr/bin/python",
]


def test_child_failed_error_table_and_agent_lines():
    exits = parse_exits(lines_of(TABLE, file="console.log"))
    table = exits.filter(pl.col("source") == "table").sort("rank")
    assert table.select("rank", "local_rank", "exitcode", "pid", "signal", "root_cause").rows() == [
        (0, 0, -6, 56213, "SIGABRT", True),
        (1, 1, -9, 56214, "SIGKILL", False),
    ]
    assert table["host"].to_list() == ["distributed-training", "distributed-training"]
    assert table["error_file"].to_list() == [None, "/tmp/torchelastic_x/attempt_0/1/error.json"]
    assert str(table["time"][0]) == "2025-07-09 17:05:39+00:00"
    assert table["line"].to_list() == [16, 7]  # cites the `[idx]:` line
    agent = exits.filter(pl.col("source") == "agent")
    assert agent.select("local_rank", "exitcode", "pid").rows() == [(0, -6, 56213), (2, 1, 5939)]


def test_table_keys_outside_a_table_are_ignored():
    stray = ["  rank      : 3 (local_rank: 3)", "  exitcode  : 1 (pid: 99)"]
    assert parse_exits(lines_of(stray)).is_empty()
