"""Hang localization end to end: fixture incidents -> LINES -> parsers -> the culprit rank."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from forensics.discover import discover
from forensics.flow import analyze, ingest_text
from forensics.incident import Incident
from forensics.ingest.c10d import parse_collectives, parse_exits
from forensics.ingest.flight_recorder import entries_frame, load_flight_recorder
from forensics.ingest.nccl import parse_nccl
from forensics.passes.collectives import localize_hang, summarize_state
from forensics.passes.rank_ranges import rank_ranges
from forensics.report.collectives_section import render_collectives
from forensics.schema import FINDINGS, LINES, conform
from tests.conftest import load_generator

ROOT = Path(__file__).resolve().parents[1]
INCIDENTS = ROOT / "fixtures" / "incidents"


GEN = load_generator("make_hang_incidents")


def localize(incident: Incident) -> Incident:
    """What the pipeline does with these modules: parse LINES and dumps, then localize."""
    lines = incident.lines
    incident.tables.update(parse_nccl(lines))
    dumps = incident.paths_of_kind("flight_recorder")
    if dumps:
        incident.merge_source(load_flight_recorder(incident.root, dumps))
    result = localize_hang(
        parse_collectives(lines), incident.tables.get("fr_entries"), incident.tables["nccl_topology"],
        lines["rank"].drop_nulls().unique().to_list(), None,
        exits=parse_exits(lines), nccl_warns=incident.tables["nccl_warns"], lines=lines,
        fr_pg_status=incident.tables.get("fr_pg_status"),
    )  # fmt: skip
    incident.merge_pass(result)
    return incident


def run(folder: Path) -> Incident:
    incident = Incident(root=folder)
    incident.inputs = discover(folder)
    ingest_text(incident)
    return localize(incident)


def culprits(incident: Incident, *patterns: str) -> pl.DataFrame:
    mine = incident.findings.filter(pl.col("pattern").is_in(list(patterns)) if patterns else pl.lit(True))
    return mine.filter(pl.col("role") == "initiating")


def captures(finding: dict) -> dict:
    return json.loads(finding["captures"])


@pytest.fixture(scope="module")
def incidents():
    return {}


def incident_of(name: str, cache: dict) -> Incident:
    if name not in cache:
        cache[name] = run(INCIDENTS / name)
    return cache[name]


@pytest.mark.parametrize(
    "name, patterns",
    [
        ("hang_nccl_8rank_one_silent", ("HANG001", "HANG002")),
        ("hang_64rank_lagging_seq", ("HANG001",)),
        ("nccl_ib_completion_error", ("NCCLNET001",)),
        ("hang_desync_mismatch", ("HANG004", "DESYNC001")),
        ("hang_flight_recorder", ("HANG001", "HANG005")),
    ],
)
def test_fixture_culprits_match_expected(name, patterns, incidents):
    expected = json.loads((INCIDENTS / name / "expected.json").read_text())
    incident = incident_of(name, incidents)
    found = culprits(incident, "HANG001", "HANG002", "HANG004", "HANG005", "DESYNC001", "NCCLNET001")
    assert sorted(set(found["rank"].to_list())) == expected["culprit_ranks"]
    assert set(found["pattern"].to_list()) == set(patterns)
    hosts = sorted(set(found["host"].drop_nulls().to_list()))
    assert hosts == expected["culprit_hosts"]
    assert found.filter(pl.col("file").is_null()).is_empty()  # every claim cites a file


def test_silent_rank_cites_its_last_line_and_the_lagging_seq(incidents):
    incident = incident_of("hang_nccl_8rank_one_silent", incidents)
    silent = culprits(incident, "HANG002").row(0, named=True)
    assert silent["file"] == "rank_5.log"
    assert silent["line"] == 11  # its log's last line: the dump signal it only observed
    assert "Last enqueued NCCL work: 1183, last completed NCCL work: 1183" in captures(silent)["evidence"]
    assert captures(silent)["crowd"] == "0-4, 6-7" and captures(silent)["crowd_seq"] == 1184
    lagging = culprits(incident, "HANG001").row(0, named=True)
    assert (captures(lagging)["lagging_seq"], captures(lagging)["others_seq"]) == (1183, 1184)
    assert lagging["pci_bus_id"] == "00000000:2A:00.0" and lagging["gpu"] == 1
    # torchrun's "Root Cause" names a SIGABRT victim; nothing here may blame it.
    assert incident.findings.filter(pl.col("pattern") == "HANG003").is_empty()


def test_lagging_seq_64_ranks(incidents):
    incident = incident_of("hang_64rank_lagging_seq", incidents)
    finding = culprits(incident, "HANG001").row(0, named=True)
    assert (finding["rank"], finding["host"]) == (37, "hgx-005")
    assert (captures(finding)["lagging_seq"], captures(finding)["others_seq"], captures(finding)["field"]) == (4408, 4409, "last_completed")
    assert "#4408" in finding["text"] and "63 other ranks" in finding["text"]
    state = incident.tables["collective_state"]
    assert state.select("ranks", "state").rows() == [("37", "culprit:HANG001"), ("0-36, 38-63", "timed_out")]


def test_network_error_names_the_rank_whose_link_failed(incidents):
    incident = incident_of("nccl_ib_completion_error", incidents)
    finding = culprits(incident, "NCCLNET001").row(0, named=True)
    assert finding["category"] == "NETWORK"
    assert captures(finding)["ib_status"] == "12" and captures(finding)["vendor_err"] == 129
    assert "status=12" in finding["text"] and finding["gpu"] == 3
    # The crowd's timeouts are not blamed on anyone: all ranks completed the same work.
    assert culprits(incident, "HANG001", "HANG002").is_empty()


def test_desync_mismatch(incidents):
    incident = incident_of("hang_desync_mismatch", incidents)
    mismatch = culprits(incident, "DESYNC001").row(0, named=True)
    assert captures(mismatch)["expected"] == "ALLREDUCE" and captures(mismatch)["found"] == "BROADCAST"
    assert captures(mismatch)["seq"] == 57


def test_flight_recorder_missing_rank_and_refused_dump(incidents, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    incident = run(INCIDENTS / "hang_flight_recorder")
    assert not (tmp_path / "FORENSICS_PICKLE_RAN").exists()
    finding = culprits(incident, "HANG005").row(0, named=True)
    assert finding["file"] == "nccl_trace_rank_3"
    assert captures(finding)["seq"] == 25
    mismatches = incident.tables["fr_mismatches"]
    assert mismatches.select("seq", "problem", "ranks", "expected").rows() == [(25, "missing_ranks", "3", "nccl:all_reduce")]
    statuses = dict(incident.inputs.select("path", "problem").rows())
    assert "refused to import" in statuses["untrusted/nccl_trace_rank_0"]


@pytest.mark.parametrize(
    ("incident", "dumps", "seq", "op"),
    [
        ("gloo_flight_recorder", ["fr_trace_0", "fr_trace_1", "fr_trace_2"], 29, "gloo:all_reduce"),  # real torch 2.13 dumps
        ("hang_flight_recorder", ["nccl_trace_rank_0", "nccl_trace_rank_1", "nccl_trace_rank_2"], 25, "nccl:all_reduce"),
    ],
)
def test_a_rank_that_left_no_flight_recorder_dump_while_the_others_wait_is_the_culprit(incident, dumps, seq, op, tmp_path):
    for name in dumps:  # the culprit, rank 3, wrote no dump
        shutil.copy(INCIDENTS / incident / name, tmp_path / name)
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.state, verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", "hung", [3])
    result = run(tmp_path)
    assert result.tables["fr_mismatches"].select("seq", "problem", "ranks", "expected").rows() == [(seq, "no_dump", "3", op)]


def test_dumps_from_seven_of_eight_ranks_name_the_eighth(tmp_path):
    """A real 8-rank torchrun (gloo): rank 5 skipped a collective; its dump was never collected."""
    for rank in (0, 1, 2, 3, 4, 6, 7):
        shutil.copy(INCIDENTS / "gloo_flight_recorder_8rank" / f"fr_trace_{rank}", tmp_path / f"fr_trace_{rank}")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.state, verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", "hung", [5])
    missing = run(tmp_path).tables["fr_mismatches"]
    assert missing.select("seq", "problem", "ranks", "expected").rows() == [(29, "no_dump", "5", "gloo:all_reduce")]


def test_dumps_missing_from_most_of_a_group_were_not_collected_and_name_nobody(tmp_path):
    shutil.copy(INCIDENTS / "hang_flight_recorder" / "nccl_trace_rank_0", tmp_path / "nccl_trace_rank_0")
    shutil.copy(INCIDENTS / "hang_flight_recorder" / "nccl_trace_rank_1", tmp_path / "nccl_trace_rank_1")
    assert "no_dump" not in run(tmp_path).tables["fr_mismatches"]["problem"].to_list()  # 2 of 4 dumped


def test_every_rank_dumped_so_no_rank_is_missing_a_dump():
    result = run(INCIDENTS / "gloo_flight_recorder")
    assert "no_dump" not in result.tables["fr_mismatches"]["problem"].to_list()


def test_flight_recorder_op_size_and_dtype_mismatch():
    dumps = [GEN.fr_dump(r, 3, 9, 1, None) for r in range(3)]
    dumps[1]["entries"][6]["profiling_name"] = "nccl:broadcast"  # seq 7
    dumps[2]["entries"][7]["input_sizes"] = [[4096, 512]]  # seq 8
    dumps[0]["entries"][8]["input_dtypes"] = ["Float"]  # seq 9
    entries = pl.concat([entries_frame(d, f"trace_{r}", r) for r, d in enumerate(dumps)])
    result = localize_hang(pl.DataFrame(), entries, None, [], 3)  # no log lines at all
    rows = result.tables["fr_mismatches"].select("seq", "problem", "ranks").rows()
    assert rows == [(7, "COLLECTIVE_TYPE_MISMATCH", "1"), (8, "SIZE_OR_SYNTAX_MISMATCH", "2"), (9, "COLLECTIVE_DTYPE_MISMATCH", "0")]
    assert sorted(result.findings["rank"].to_list()) == [0, 1, 2]
    assert set(result.findings["pattern"]) == {"DESYNC001"}


def test_1024_ranks_fold_into_ranges(tmp_path):
    folder = GEN.write_lagging(tmp_path, world=1024, per_host=8, culprit=512, name="hang_1024")
    incident = run(folder)
    finding = culprits(incident, "HANG001").row(0, named=True)
    assert (finding["rank"], finding["host"]) == (512, "hgx-065")
    assert captures(finding)["lagging_seq"] == 4408
    state = incident.tables["collective_state"]
    assert state.select("ranks", "n_ranks", "last_completed").rows() == [("512", 1, 4408), ("0-511, 513-1023", 1023, 4409)]
    assert incident.tables["nccl_topology"].height == 1024
    markdown = render_collectives(incident.tables)
    assert "0-511, 513-1023" in markdown
    assert markdown.count("\n| ") < 60  # summarized, not one row per rank


def test_real_gloo_hang_names_the_rank_that_skipped_the_collective():
    folder = INCIDENTS / "rank_skips_collective"
    if not folder.exists():
        pytest.skip("real torchrun fixture not present")
    incident = run(folder)
    found = culprits(incident, "HANG002")
    assert found["rank"].to_list() == [3]
    assert captures(found.row(0, named=True))["crowd"] == "0-2"


def test_no_timeouts_no_findings():
    lines = conform(pl.DataFrame({"file": "r.log", "line": [1], "text": ["step 1 | loss 2.0"], "rank": [0]}), LINES)
    incident = localize(Incident(root=Path("."), lines=lines))
    assert incident.findings.is_empty()
    assert incident.findings.columns == list(FINDINGS)


def test_rank_ranges_and_summary():
    assert rank_ranges([7, 0, 1, 2, 3, 9, 10, 10]) == "0-3, 7, 9-10"
    assert rank_ranges([]) == ""
    per_rank = pl.DataFrame(
        {"rank": [0, 1, 2, 3], "pg": "0", "last_enqueued": [5, 5, 4, 5], "last_completed": 4, "timed_out_seq": [5, 5, None, 5],
         "op_type": "ALLREDUCE", "state": ["timed_out", "timed_out", "culprit:HANG001", "timed_out"], "host": None},
    )  # fmt: skip
    summary = summarize_state(per_rank)
    assert summary.select("ranks", "n_ranks").rows() == [("2", 1), ("0-1, 3", 3)]


def test_report_escapes_log_text():
    warns = pl.DataFrame(
        {"kind": ["other"], "rank": [3], "file": ["a|b.log"], "line": [7], "time": [None],
         "msg": ["evil `code` | pipe <script>alert(1)</script>"]},
        schema_overrides={"time": pl.Datetime("us", "UTC")},
    )  # fmt: skip
    markdown = render_collectives({"nccl_warns": warns})
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert "evil `code`" not in markdown
    row = next(line for line in markdown.splitlines() if "evil" in line)
    assert row.count(" | ") == 4  # the pipe in the message did not add a column
    assert render_collectives({}) == ""


def _lines(texts: list[str], rank: int | None = None) -> pl.DataFrame:
    return conform(pl.DataFrame({"file": "console.log", "line": range(1, len(texts) + 1), "text": texts, "rank": rank}), LINES)


# Horovod's stall report, as posted (horovod/horovod#1012 before 0.21, #3950 from 0.21 on).
HOROVOD_OLD = [
    "[1,0]<stderr>:[2019-04-13 13:55:31.858119: W horovod/common/operations.cc:588] HorovodBroadcast_dense_kernel_Momentum_0 [missing ranks: 1]",
    "[1,0]<stderr>:[2019-04-13 13:55:31.858168: W horovod/common/operations.cc:588] HorovodBroadcast_conv2d_bias_Momentum_0 [missing ranks: 1]",
    "HorovodBroadcast_fully_connected_weights_0 [missing ranks: 0]",
]
HOROVOD_NEW = [
    "[0] [2023-06-26 07:23:58.477178: W /tmp/pip-install-6w4n_ndu/horovod_4c00129df9d64c2680a27be18c9b88cd/horovod/common/stall_inspector.cc:107] "
    "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks "
    "for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of "
    "ranks is submitting tensors, which will cause deadlock. ",
    "[0] Missing ranks:",
    "[0] 1: [broadcast.assign_conv_block_modules.0.0.bias, broadcast.assign_conv_block_modules.0.0.weight, broadcast.assign_conv_first_modules.0.bias, "
    "broadcast.assign_conv_first_modules.0.weight, broadcast.assign_conv_last_modules.0.bias, broadcast.assign_conv_last_modules.0.weight ...]",
]


def test_horovod_stall_reports_name_the_missing_ranks_in_both_formats():
    old = parse_collectives(_lines(HOROVOD_OLD, rank=0))
    assert old["kind"].to_list() == ["stall_report"] * 3
    assert old["ranks_named"].to_list() == [[1], [1], [0]]
    assert old["op_type"].to_list()[0] == "HorovodBroadcast_dense_kernel_Momentum_0"
    new = parse_collectives(_lines(HOROVOD_NEW))
    stall = new.filter(pl.col("kind") == "stall_report")
    assert stall["ranks_named"].to_list() == [[1]] and stall["line"].to_list() == [3]
    assert stall["op_type"].to_list() == ["broadcast.assign_conv_block_modules.0.0.bias"]


# Horovod before 0.16 lists the ranks that ARE ready (horovod/horovod#215 and #364, as posted).
HOROVOD_READY = [
    "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for "
    "remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors "
    "or that only subset of ranks is submitting tensors, which will cause deadlock. Stalled ops: "
    "training/SGD/DistributedSGD_Allreduce/HorovodAllreduce_training_SGD_gradients_conv1_1_BiasAdd_grad_BiasAddGrad_0 "
    "[ready ranks: 21, 25, 26, 27, 28, 29, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 1, 3, 0, 15, 17, 18, 20, 22, 23, 24, 31, 8, 19, 2, 30]",
    "allreduce.conv1.weight [ready ranks: 0, 7, 3, 2, 4, 6], ",
    " allreduce.layer1.0.conv2.weight [ready ranks: 0, 7, 3, 4, 2, 6], ",
]


def test_an_old_horovod_ready_list_names_the_ranks_missing_from_it():
    stalls = parse_collectives(_lines(HOROVOD_READY)).filter(pl.col("kind") == "stall_report")
    assert stalls["ranks_named"].to_list() == [[16], [1, 5], [1, 5]]
    assert stalls["op_type"].to_list()[1:] == ["allreduce.conv1.weight", "allreduce.layer1.0.conv2.weight"]


def test_one_report_line_naming_two_ranks_blames_both_through_the_pipeline(tmp_path):
    (tmp_path / "console.log").write_text("\n".join(HOROVOD_READY[1:]) + "\n")
    verdict = analyze(tmp_path).verdict
    assert verdict.category == "COLLECTIVE_TIMEOUT"
    assert verdict.culprit_ranks == [1, 5]


def test_six_ranks_named_missing_in_a_job_of_at_least_116_are_culprits_not_a_job_wide_cause(tmp_path):
    """horovod/horovod#373 as posted: no line carries a rank, the report names 6 of 116+ ranks."""
    (tmp_path / "console.log").write_text(
        "Loss_Optimization/DistributedLazyAdamOptimizer_Allreduce/HorovodAllgather_Loss_Optimization_gradients_concat_0 [missing ranks: 25, 27, 60, 67, 103, 115]"
        + "\n"
    )
    assert analyze(tmp_path).verdict.culprit_ranks == [25, 27, 60, 67, 103, 115]


def test_a_horovod_stall_report_blames_the_missing_rank_not_the_reporter():
    lines = _lines(HOROVOD_OLD[:2], rank=0)
    result = localize_hang(parse_collectives(lines), None, pl.DataFrame(schema={"nranks": pl.Int32}), [0], None, lines=lines)
    blamed = result.findings.filter(pl.col("pattern") == "HANG004")
    assert blamed["rank"].to_list() == [1]
    assert blamed["text"][0] == (
        "Horovod stall report (from rank 0): rank 1 never submitted tensor HorovodBroadcast_dense_kernel_Momentum_0 that the others wait on"
    )


def test_a_stall_report_naming_impossible_ranks_blames_nobody():
    hostile = ["HorovodBroadcast_x_0 [missing ranks: 2000000000]", "Missing ranks:", "99999999999: [t, u]"]
    lines = _lines(hostile)
    stalls = parse_collectives(lines).filter(pl.col("kind") == "stall_report")
    assert stalls["ranks_named"].to_list() == [[], []]
    result = localize_hang(parse_collectives(lines), None, pl.DataFrame(schema={"nranks": pl.Int32}), [], None, lines=lines)
    assert result.findings.filter(pl.col("pattern") == "HANG004").is_empty()


# Real lines of a one-rank job on an H100 whose kernel spun past the 10 s timeout (fixtures/incidents/gpu_kernel_hang_nccl_watchdog).
SOLE_INIT = "vm:1064:1064 [0] NCCL INFO ncclCommInitRankConfig comm 0x292b6f50 rank 0 nranks {n} cudaDev 0 nvmlDev 0 busId 60 commId 0x88b6045b60609424 - Init COMPLETE"
SOLE_TIMEOUT = (
    "[rank0]:[E1124 18:49:06.670974723 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=29, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=10000) ran for 10017 milliseconds before timing out."
)
SOLE_ABORT = ["terminate called after throwing an instance of 'c10::DistBackendError'", "Fatal Python error: Aborted"]


def test_the_only_rank_of_a_job_whose_collective_timed_out_is_its_own_culprit_and_the_job_hung(tmp_path):
    (tmp_path / "stdout.log").write_text(SOLE_INIT.format(n=1) + "\n")
    (tmp_path / "stderr.log").write_text("\n".join([SOLE_TIMEOUT, *SOLE_ABORT]) + "\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", [0])
    assert verdict.state == "hung", "the watchdog's abort ends the hang; it is not a crash of the rank's own"


def test_one_rank_timing_out_in_a_job_of_eight_names_no_culprit_from_itself(tmp_path):
    (tmp_path / "stdout.log").write_text(SOLE_INIT.format(n=8) + "\n")
    (tmp_path / "stderr.log").write_text(SOLE_TIMEOUT + "\n")
    findings = analyze(tmp_path).incident.findings
    assert "HANG007" not in findings["pattern"].to_list()


# ultralytics/ultralytics#2023 (ranks 1-3 wait mid-run in a broadcast rank 0 never joins) and the
# first-collective and two-rank shapes of the same lines, which name no one.
def _watchdog(rank: int, seq: int, op: str = "BROADCAST") -> str:
    return (
        f"[E ProcessGroupNCCL.cpp:828] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType={op}, Timeout(ms)=1800000) ran for 1800764 milliseconds before timing out."
    )


@pytest.mark.parametrize(
    "ranks, seq, culprits",
    [([1, 3, 2], 10792, [0]), ([3, 2, 1], 1, []), ([1, 2], 7930, [])],
    ids=["mid-run: rank 0 was elsewhere", "first collective: the transport or setup", "two ranks: too few to say"],
)
def test_every_rank_but_0_timing_out_in_one_collective_past_the_first_names_rank_0(tmp_path, ranks, seq, culprits):
    (tmp_path / "console.log").write_text("\n".join(_watchdog(r, seq) for r in ranks) + "\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", culprits)


# NVIDIA/nccl#1730: rank 118's real `failure detected by watchdog` line (enqueued 2398578, completed
# 2398458); its peers' lines are the same format with the numbers a rank ahead of it would log.
def _detected(rank: int, enqueued: int, completed: int) -> str:
    return (
        f"[rank{rank}]:[E603 17:48:01.005538748 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank {rank}]  "
        f"failure detected by watchdog at work sequence id: {completed + 1} PG status: last enqueued work: {enqueued}, "
        f"last completed work: {completed}"
    )


@pytest.mark.parametrize(
    "enqueued, side",
    [(2398578, "held up on the GPU: it issued up to #2398578, but #2398459 never finished"), (2398458, "held up on the host")],
    ids=["issued, not finished: GPU side", "never issued: host side"],
)
def test_the_lagging_rank_is_said_to_be_held_up_on_the_host_or_on_the_gpu(tmp_path, enqueued, side):
    lines = [_detected(118, enqueued, 2398458), _detected(3, 2398578, 2398459), _detected(7, 2398578, 2398459)]
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", [118])
    assert side in verdict.summary


# Real lines of ranks that gave up fetching rank 0's NCCL unique id: pytorch/pytorch#131781 (rank 0's
# store gone), hiyouga/LlamaFactory#2470 (pdsh host prefix), pytorch/pytorch#82091 (older spelling).
UNIQUE_ID_WAITS = [
    "[rank15]: torch.distributed.DistBackendError: [15] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d "
    "key-value store by key '0', but store->get('0') got error: Connection reset by peer",
    "gpu004: RuntimeError: [14] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', "
    "but store->get('0') got error: Connection reset by peer. This may indicate a possible application crash on rank 0 or a network set up issue.",
    "RuntimeError: [2] is setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value store by key '0', "
    "but store->get('0') got error: Socket Timeout",
]


@pytest.mark.parametrize("line", UNIQUE_ID_WAITS, ids=["rank prefix", "host prefix", "old spelling"])
def test_a_rank_that_gave_up_on_the_nccl_unique_id_names_the_rank_that_never_published_it(tmp_path, line):
    (tmp_path / "console.log").write_text(line + "\n")
    analysis = analyze(tmp_path)
    assert analysis.incident.findings.filter(pl.col("pattern") == "HANG008")["rank"].to_list() == [0]
    assert (analysis.verdict.category, analysis.verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", [0])


def test_rank_0_s_own_error_is_the_cause_the_unique_id_wait_only_points_to_it(tmp_path):
    oom = (
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 0 has a total capacity of 79.10 GiB "
        "of which 364.31 MiB is free."
    )
    (tmp_path / "console.log").write_text("\n".join([oom, UNIQUE_ID_WAITS[0]]) + "\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("CUDA_OOM", [0])
