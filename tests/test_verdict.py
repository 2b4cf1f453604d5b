"""Verdict fusion on synthetic FINDINGS: the initiator wins over the crowd, specificity breaks ties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from forensics.ingest.metrics import extract_metrics
from forensics.passes.cross_rank import rank_table
from forensics.passes.health import health_proofs
from forensics.passes.templates import unmatched_error_templates
from forensics.schema import LINES, Category, conform
from forensics.verdict import decide
from tests.conftest import findings_frame


def _verdict_of(tmp_path, lines: list[str]):
    """The verdict of a console.log holding `lines`, analyzed end to end."""
    from forensics.flow import analyze

    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    return analyze(tmp_path).verdict


T0 = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)
OOM = "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 5 has a total capacity of 79.10 GiB of which 364.31 MiB is free."
WATCHDOG = "[rank{r}]:[E101 10:10:00.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before timing out."


def finding(pattern, category, role, file, line, rank, time, text, severity="critical", host=None):
    return {
        "pattern": pattern,
        "title": pattern,
        "category": category,
        "severity": severity,
        "role": role,
        "file": file,
        "line": line,
        "rank": rank,
        "host": host,
        "time": time,
        "text": text,
    }


def lines_for(rows: list[dict], extra: list[dict] | None = None) -> pl.DataFrame:
    """The LINES a set of findings was cut from, plus a first line per file at T0."""
    starts = [{"file": f, "line": 0, "rank": r, "time": T0, "text": "start"} for f, r in {(x["file"], x["rank"]) for x in rows}]
    cited = [{k: x[k] for k in ("file", "line", "rank", "time", "text")} for x in rows]
    frame = pl.DataFrame(starts + cited + (extra or []), schema_overrides={"time": pl.Datetime("us", "UTC"), "rank": pl.Int32})
    return conform(frame.sort("file", "line"), LINES).with_columns(pl.col("line").cast(pl.Int64))


def verdict_of(rows: list[dict], lines: pl.DataFrame | None = None):
    findings = findings_frame(rows)
    lines = lines if lines is not None else lines_for(rows)
    world = None
    ranks = rank_table(lines, findings, extract_metrics(lines), world)
    unmatched = unmatched_error_templates(lines, findings)
    proofs = health_proofs(lines, extract_metrics(lines), findings)
    return decide(findings, lines, ranks, unmatched, {}, world, proofs)


def _watchdog_crowd(ranks: int, seconds: int, severity: str) -> list[dict]:
    """Every rank but 5 timing out in the watchdog, `seconds` after T0."""
    at = T0 + timedelta(seconds=seconds)
    return [
        finding("NCCL_WD", "COLLECTIVE_TIMEOUT", "cascade", f"rank_{r}.log", 200, r, at, WATCHDOG.format(r=r), severity=severity)
        for r in range(ranks)
        if r != 5
    ]


def test_one_oom_and_a_crowd_of_timeouts_is_cuda_oom_on_that_rank():
    oom = finding("OOM001", "CUDA_OOM", "initiating", "rank_5.log", 100, 5, T0 + timedelta(seconds=10), OOM)
    crowd = _watchdog_crowd(64, seconds=610, severity="error")
    v = verdict_of([oom, *crowd])
    assert v.category == Category.CUDA_OOM
    assert v.culprit_ranks == [5]
    assert v.first_failure["file"] == "rank_5.log" and v.first_failure["line"] == 100
    assert v.state == "crashed"
    assert "63 other ranks then failed in cascade" in v.summary
    assert [h.category for h in v.hypotheses] == ["CUDA_OOM", "COLLECTIVE_TIMEOUT"]
    assert v.hypotheses[1].culprit_ranks == []  # the crowd alone names no culprit


def test_the_crowd_does_not_win_by_numbers_even_when_earlier():
    oom = finding("OOM001", "CUDA_OOM", "initiating", "rank_5.log", 100, 5, T0 + timedelta(seconds=30), OOM)
    crowd = _watchdog_crowd(1024, seconds=1, severity="critical")
    assert verdict_of([oom, *crowd]).category == Category.CUDA_OOM


def test_xid_seconds_before_a_network_error_is_hardware():
    xid = finding(
        "XID079",
        "HARDWARE",
        "initiating",
        "node3/dmesg.log",
        40,
        None,
        T0 + timedelta(seconds=100),
        "[Fri Jan  1 10:01:40 2026] NVRM: Xid (PCI:0000:2b:00): 79, pid=1797828, name=pt_main_thread, GPU has fallen off the bus.",
        host="node3",
    )
    ib = finding(
        "NCCL_IB",
        "NETWORK",
        "initiating",
        "rank_2.log",
        70,
        2,
        T0 + timedelta(seconds=103),
        "node3:185303:186751 [2] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer 10.99.91.63<51161> with status=12",
        severity="error",
        host="node3",
    )
    v = verdict_of([xid, ib])
    assert v.category == Category.HARDWARE
    assert v.culprit_hosts == ["node3"]
    assert v.hypotheses[1].category == Category.NETWORK


def test_host_oom_explains_the_sigkill():
    killer = finding(
        "HOSTOOM001",
        "HOST_OOM",
        "initiating",
        "node1/kern.log",
        12,
        None,
        T0 + timedelta(seconds=50),
        "Jan  1 10:00:50 node1 kernel: Out of memory: Killed process 4242 (python) total-vm:98765432kB, anon-rss:87654321kB",
        host="node1",
    )
    sigkill = finding(
        "TORCHRUN_SIG9",
        "PROCESS_KILLED",
        "symptom",
        "console.log",
        300,
        3,
        T0 + timedelta(seconds=52),
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 3 (pid: 4242) of binary: /usr/bin/python",
        severity="error",
    )
    v = verdict_of([killer, sigkill])
    assert v.category == Category.HOST_OOM
    assert v.culprit_hosts == ["node1"]


def test_only_cascades_is_a_collective_timeout_without_culprit():
    crowd = [
        finding(
            "NCCL_WD",
            "COLLECTIVE_TIMEOUT",
            "cascade",
            f"rank_{r}.log",
            9,
            r,
            T0 + timedelta(seconds=600),
            WATCHDOG.format(r=r),
            severity="error",
        )
        for r in range(8)
    ]
    v = verdict_of(crowd)
    assert v.category == Category.COLLECTIVE_TIMEOUT
    assert v.culprit_ranks == []
    assert v.state == "hung"


def test_nothing_is_no_failure():
    lines = conform(
        pl.DataFrame(
            {"file": "rank_0.log", "line": [1, 2, 3], "rank": 0, "text": ["step 1 | loss 3.5", "step 2 | loss 3.4", "step 3 | loss 3.3"]}
        ),
        LINES,
    )
    v = verdict_of([], lines)
    assert v.category == Category.NO_FAILURE  # the stream still logs metrics at its end
    assert v.state == "healthy"
    assert v.first_failure is None and v.hypotheses == []
    assert [(p["kind"], p["line"], p["text"]) for p in v.proofs] == [("progressing", 3, "step 3 | loss 3.3")]  # the proof is cited
    two_steps = verdict_of([], lines.head(2))
    assert (two_steps.category, two_steps.state) == (Category.UNKNOWN, "unknown")  # two steps are not yet a run going on
    assert two_steps.proofs == []


def test_events_and_info_findings_are_not_failures_nor_proof_of_health():
    saved = finding("CKPT_SAVED", "CHECKPOINT_IO", "event", "rank_0.log", 5, 0, T0, "Saved checkpoint to /ckpt/step_100", severity="info")
    v = verdict_of([saved])
    assert v.hypotheses == []
    assert (v.category, v.state) == (Category.UNKNOWN, "unknown")


def test_a_completion_line_is_proof_of_health():
    done = finding(
        "OK001",
        "NO_FAILURE",
        "event",
        "rank_0.log",
        9,
        0,
        T0,
        "[default0]:2026-11-21 19:59:31,420 INFO [rank0] training finished after 30 steps",
        severity="info",
    )
    v = verdict_of([done])
    assert (v.category, v.state) == (Category.NO_FAILURE, "healthy")
    assert "completion" in v.summary
    assert [(p["kind"], p["file"], p["line"]) for p in v.proofs] == [("completion", "rank_0.log", 9)]


def test_no_evidence_either_way_is_unknown_not_healthy():
    lines = conform(pl.DataFrame({"file": "rank_0.log", "line": [1, 2], "rank": 0, "text": ["loading model", "building dataset"]}), LINES)
    v = verdict_of([], lines)
    assert (v.category, v.state) == (Category.UNKNOWN, "unknown")
    assert v.confidence < 0.5


def test_unmatched_error_only_is_unknown_and_cites_it():
    lines = conform(
        pl.DataFrame(
            {
                "file": "rank_1.log",
                "line": [1, 2, 3],
                "rank": 1,
                "text": [
                    "[rank1]: Traceback (most recent call last):",
                    '[rank1]:   File "x.py", line 3',
                    "[rank1]: ZeroDivisionError: division by zero",
                ],
            }
        ),
        LINES,
    )
    v = verdict_of([], lines)
    assert v.category == Category.UNKNOWN
    assert v.state == "crashed"  # the program ended on that exception
    assert (v.first_failure["file"], v.first_failure["line"]) == ("rank_1.log", 3)


def test_an_error_level_log_line_is_failure_evidence_even_without_an_exception_line():
    """ShoufaChen/DiffusionDet#39: detectron2 logs the failure at ERROR level; the traceback after it was not pasted."""
    texts = [
        "[12/20 18:16:14 d2.utils.events]:  eta: 19:46:57  iter: 4979  total_loss: 9.924  loss_ce: 0.7974  loss_bbox: 0.3912  loss_giou: 0.3875  loss_ce_0: 0.8377  loss_bbox_0: 0.4803  loss_giou_0: 0.448  loss_ce_1: 0.8489  loss_bbox_1: 0.3942  loss_giou_1: 0.3934  loss_ce_2: 0.8181  loss_bbox_2: 0.4009  loss_giou_2: 0.3799  loss_ce_3: 0.7867  loss_bbox_3: 0.3836  loss_giou_3: 0.38  loss_ce_4: 0.7726  loss_bbox_4: 0.3905  loss_giou_4: 0.3784  time: 0.2814  data_time: 0.0108  lr: 2.5e-05  max_mem: 5418M",
        "[12/20 18:16:20 fvcore.common.checkpoint]: Saving checkpoint to ./output/model_0004999.pth",
        "ERROR [12/20 18:16:20 d2.engine.train_loop]: Exception during training:",
    ]
    lines = conform(pl.DataFrame({"file": "console.log", "line": [1, 2, 3], "rank": None, "text": texts}), LINES)
    v = verdict_of([], lines)
    assert (v.category, v.state, v.first_failure["line"]) == (Category.UNKNOWN, "crashed", 3)


def test_untimed_lines_are_ordered_by_the_previous_time_in_their_stream():
    # rank_0.log: 10:00:00 then an untimed DataLoader error; rank_1.log: a CUDA error at 10:00:30.
    # The untimed error happened after 10:00:00, so it is the earlier failure, though CUDA_ERROR
    # is the more specific category.
    loader = finding(
        "DATA001",
        "DATA_PIPELINE",
        "initiating",
        "rank_0.log",
        5,
        0,
        None,
        "[rank0]: RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error.",
    )
    cuda = finding(
        "CUDA001",
        "CUDA_ERROR",
        "initiating",
        "rank_1.log",
        5,
        1,
        T0 + timedelta(seconds=30),
        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    v = verdict_of([loader, cuda])
    assert v.category == Category.DATA_PIPELINE
    assert v.culprit_ranks == [0]


def test_the_previous_time_comes_from_the_same_rank_not_the_same_file():
    # One console: rank 1 logs at 10:09, then rank 0's untimed error; rank 0 last spoke at 10:00.
    loader = finding(
        "DATA001",
        "DATA_PIPELINE",
        "initiating",
        "console.log",
        5,
        0,
        None,
        "[rank0]: RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error.",
    )
    cuda = finding(
        "CUDA001",
        "CUDA_ERROR",
        "initiating",
        "rank_2.log",
        5,
        2,
        T0 + timedelta(seconds=30),
        "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    rank1_late = {"file": "console.log", "line": 4, "rank": 1, "time": T0 + timedelta(minutes=9), "text": "[rank1]: late"}
    v = verdict_of([loader, cuda], lines_for([loader, cuda], extra=[rank1_late]))
    assert v.category == Category.DATA_PIPELINE


SIGBUS = "  traceback : Signal 7 (SIGBUS) received by PID {pid}"  # accelerate test in Docker, huggingface/accelerate#1254


def test_every_rank_failing_the_same_way_first_hand_names_no_culprit():
    rows = [finding("TRUN010", "UNKNOWN", "symptom", "console.log", 10 + r, r, T0, SIGBUS.format(pid=210 + r), "error") for r in range(4)]
    assert verdict_of(rows).culprit_ranks == []


def test_one_rank_of_four_failing_first_hand_is_the_culprit():
    rows = [finding("TRUN010", "UNKNOWN", "symptom", "console.log", 11, 1, T0, SIGBUS.format(pid=211), "error")]
    lines = lines_for(rows, [{"file": f"rank_{r}.log", "line": 1, "rank": r, "time": T0, "text": "step 1"} for r in (0, 2, 3)])
    assert verdict_of(rows, lines).culprit_ranks == [1]


def test_a_known_cause_outranks_the_bare_exits_it_explains():
    """srun's exit lines say that tasks failed, not why; the time-limit line says why, even when printed later."""
    exit_line = finding(
        "SLURM007", "UNKNOWN", "symptom", "slurm.out", 10, None, T0, "srun: error: node17: task 0: Exited with exit code 1", "error"
    )
    limit = finding(
        "SLURM001",
        "PROCESS_KILLED",
        "initiating",
        "slurm.out",
        12,
        None,
        T0 + timedelta(seconds=300),
        "slurmstepd: error: *** JOB 12345 ON node17 CANCELLED AT 2024-05-08T10:00:00 DUE TO TIME LIMIT ***",
    )
    assert verdict_of([exit_line, limit]).category == "PROCESS_KILLED"


def test_a_cut_traceback_yields_even_to_cascade_evidence():
    cut = finding("EXC002", "UNKNOWN", "symptom", "rank_2.log", 14, 2, T0, "[rank2]:              ^^^^^^^^^^^^^^^^", "error")
    remote = finding(
        "DIST017",
        "NETWORK",
        "cascade",
        "rank_3.log",
        5,
        3,
        T0,
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3763, remote process exited or there was a network error",
        "error",
    )
    assert verdict_of([cut, remote]).category == "NETWORK"


def test_a_sticky_cuda_error_ends_the_process_without_an_exception_line():
    cuda = finding(
        "CUDA010",
        "CUDA_ERROR",
        "initiating",
        "rank_1.log",
        3,
        1,
        T0,
        "n122-164-108:7400:7642 [1] include/alloc.h:125 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'",
    )
    assert verdict_of([cuda]).state == "crashed"


def test_a_failure_at_the_first_timestamp_says_the_logs_start_there_not_zero_seconds_in(incident):
    from forensics.flow import analyze

    text = (
        "2024-11-14 03:14:24,101 [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 1 has a total capacity of 79.10 GiB of which 1.06 GiB is free.\n"
    )
    triage = analyze(incident({"rank_1.log": text})).verdict.triage
    assert any("the logs start at the failure" in note for note in triage)
    assert not any(note.startswith("Failed ") for note in triage)


def test_an_agent_stopped_by_a_signal_in_newer_torch_wording_is_a_killed_job(tmp_path):
    """torch >= 2.3 prints the agent's signal as `Signals.SIGTERM`: still an external stop, and the job ended."""
    from forensics.flow import analyze

    (tmp_path / "console.log").write_text(
        "W0616 00:44:57.731000 4026234 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death signal, shutting down workers\n"
        "W0616 00:44:57.732000 4026234 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 4026322 closing signal SIGTERM\n"
    )
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.state) == ("PROCESS_KILLED", "crashed")


def test_an_abort_on_ranks_whose_watchdog_timed_out_is_the_timeout_not_an_unknown_exit(tmp_path):
    """torchrun's `exitcode: -6` says only that rank 0 aborted; its own watchdog line says why."""
    from forensics.flow import analyze

    (tmp_path / "console.log").write_text(
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -6) local_rank: 0 (pid: 514946) of binary: \n"
        "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.\n"
        "[E ProcessGroupNCCL.cpp:737] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802211 milliseconds before timing out.\n"
    )
    assert analyze(tmp_path).verdict.category == "COLLECTIVE_TIMEOUT"


def test_a_launch_configuration_error_reported_by_every_rank_is_the_job_s_not_a_rank_s(tmp_path):
    """Two ranks pinned to one GPU (real torch 2.11 / NCCL 2.28 lines from an H100): ENVIRONMENT, no culprit rank."""
    from forensics.flow import analyze

    for rank, other in ((0, 1), (1, 0)):
        (tmp_path / f"rank{rank}.log").write_text(
            f"[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, "
            "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
            f"[rank{rank}]: Last error:\n"
            f"[rank{rank}]: Duplicate GPU detected : rank {rank} and rank {other} both on CUDA device 60\n"
        )
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("ENVIRONMENT", [])
    assert verdict.summary.endswith("2 ranks reported it: a problem of the job's setup, not of one rank.")
    assert "UNKNOWN" not in verdict.summary


def test_a_misnamed_socket_interface_on_the_only_rank_blames_the_setup_not_rank_0(tmp_path):
    from forensics.flow import analyze

    (tmp_path / "stdout.log").write_text(
        "[2026-11-24 18:50:25] vm:1161:1161 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found\n"
    )
    (tmp_path / "stderr.log").write_text("[rank0]: Last error:\n[rank0]: Bootstrap : no socket interface found\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("ENVIRONMENT", [])


FAIRSEQ_INCONSISTENT = (
    "FloatingPointError: Fatal error: gradients are inconsistent between workers. Try --ddp-backend=no_c10d. "
    "Or are you mixing up different generation of GPUs in training?"
)


def test_fairseq_workers_whose_grad_norms_are_all_nan_are_a_numerical_failure_of_the_whole_step(tmp_path):
    """facebookresearch/fairseq#1372 as posted: every worker's row is nan."""
    from forensics.flow import analyze

    rows = [f"rank   {r} = nan" for r in range(8)]
    (tmp_path / "train.log").write_text("\n".join([FAIRSEQ_INCONSISTENT, "-" * 80, "grad_norm across the workers:", *rows, ""]) + "\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("NUMERICAL", [])


def test_fairseq_workers_with_finite_but_different_grad_norms_are_no_numerical_failure(tmp_path):
    """OFA-Sys/OFA#352's rows: finite norms that differ say nothing about NaN."""
    from forensics.flow import analyze

    rows = ["rank   0 = 43.87894113", "rank   1 = 36.76721862", "rank   2 = 32.03398652", "rank   3 = 32.47642299"]
    (tmp_path / "train.log").write_text("\n".join([FAIRSEQ_INCONSISTENT, "-" * 80, "grad_norm across the workers:", *rows]) + "\n")
    assert analyze(tmp_path).verdict.category != "NUMERICAL"


@pytest.mark.parametrize(
    "line",
    [
        "tensorflow.python.framework.errors_impl.UnknownError:  ncclCommInitRank failed: unhandled system error",  # horovod#1651
        "tensorflow.python.framework.errors_impl.UnknownError: ncclCommInitRank failed: ncclCommInitRank failed: unhandled system error",  # horovod#1195
    ],
)
def test_horovod_s_wording_of_nccl_s_system_error_is_a_network_failure(tmp_path, line):
    from forensics.flow import analyze

    (tmp_path / "slurm-1.out").write_text(
        line + "\nsrun: error: jwc09n018: task 1: Exited with exit code 1\nsrun: error: jwc09n012: task 0: Exited with exit code 1\n"
    )
    assert analyze(tmp_path).verdict.category == "NETWORK"


@pytest.mark.parametrize(
    "lines, category, state",
    [
        # modelscope/ms-swift#64 and PrimeIntellect prime-rl#1360: the torchrun agent itself was signalled.
        (
            [
                "W1130 12:13:49.388000 124326 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, shutting down workers"
            ],
            "PROCESS_KILLED",
            "crashed",
        ),
        # NVIDIA/nccl#1814: an IB completion error and nothing after it.
        (
            [
                "hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 172.36.143.59<44206> with status=12 opcode=129 len=65536 vendor err 129 (Recv) localGid ::ffff:29.87.88.182 remoteGids::ffff:29.87.4.221"
            ],
            "NETWORK",
            "crashed",
        ),
        # The same error, then the watchdog of the rank that waits for the broken link.
        (
            [
                "hostname-test:984:1357 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 172.36.143.59<44206> with status=12 opcode=129 len=65536 vendor err 129 (Recv) localGid ::ffff:29.87.88.182 remoteGids::ffff:29.87.4.221",
                "[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=10792, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800764 milliseconds before timing out.",
            ],
            "NETWORK",
            "hung",
        ),
        # OpenNMT#463: Lua torch's checkpoint writer ran out of disk, logged at no level.
        (
            [
                "[12/18/17 06:01:29 INFO] Saving checkpoint to '/MT-work/Corpus/en-US_lv-LV/Jonckers/Global/171208/Jonckers_Global_en_lv_checkpoint.t7'...",
                "/home/mtuser/torch/install/bin/luajit: /home/mtuser/torch/install/share/lua/5.1/torch/File.lua:210: write error: wrote 9367499 blocks instead of 31014000 at /home/mtuser/torch/pkg/torch/lib/TH/THDiskFile.c:356",
            ],
            "CHECKPOINT_IO",
            "crashed",
        ),
        # NVIDIA/nccl#1528: a CUDA failure NCCL logs as a warning and returns up the call chain.
        (
            [
                "c76d92cccb6e:72:457 [1] enqueue.cc:58 NCCL WARN Cuda failure 'named symbol not found'",
                "c76d92cccb6e:72:457 [1] NCCL INFO init.cc:1475 -> 1",
            ],
            "CUDA_ERROR",
            "crashed",
        ),
        # PaddleDetection#3531: an IDE's run window reports the kill.
        (["Process finished with exit code 137 (interrupted by signal 9: SIGKILL)"], "PROCESS_KILLED", "crashed"),
        # NVIDIA/nccl#914: only NCCL's error chain survived, a system error returned up through the proxy.
        (
            [
                "host:22337:22453 [6] NCCL INFO misc/socket.cc:387 -> 2",
                "host:22337:22453 [6] NCCL INFO transport/net_ib.cc:605 -> 2",
                "host:22337:22453 [6] NCCL INFO include/net.h:26 -> 2",
                "host:22337:22453 [6] NCCL INFO transport/net.cc:515 -> 2",
                "host:22337:22453 [6] NCCL INFO proxy.cc:968 -> 2",
            ],
            "NETWORK",
            "crashed",
        ),
    ],
    ids=[
        "agent death signal",
        "IB error alone",
        "IB error then a timeout",
        "checkpoint write error",
        "NCCL CUDA failure",
        "IDE exit 137",
        "NCCL error chain",
    ],
)
def test_an_error_with_a_cause_ends_the_job_unless_the_ranks_then_hung(tmp_path, lines, category, state):
    verdict = _verdict_of(tmp_path, lines)
    assert (verdict.category, verdict.state) == (category, state)


def test_a_launcher_s_failure_summary_alone_is_a_crash_of_unknown_cause(tmp_path):
    """A torchrun failure table whose rows were pasted without their layout (AMVUR#2): no exit
    code can be read, but torchrun raises ChildFailedError only when a worker failed."""
    lines = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "experiments/supervised HO3D V2.py FAILED",
        "Failures:",
        "<NO OTHER FAILURES>",
    ]
    verdict = _verdict_of(tmp_path, lines)
    assert (verdict.category, verdict.state) == ("UNKNOWN", "crashed")
    assert verdict.first_failure is not None and verdict.first_failure["line"] in (1, 2)


# The DeepSpeed launcher tearing its workers down while they load a checkpoint (DeepSpeed#1956):
# a run that ends well never does, and no worker left an error of its own.
TEARDOWN = [
    "[2022-05-15 00:12:51,292] [INFO] [engine.py:2754:_get_all_zero_checkpoint_state_dicts] successfully read 2 ZeRO state_dicts for rank 0",
    "[2022-05-15 00:12:57,785] [INFO] [launch.py:178:sigkill_handler] Killing subprocess 97277",
    "[2022-05-15 00:12:57,786] [INFO] [launch.py:178:sigkill_handler] Killing subprocess 97278",
]


@pytest.mark.parametrize(
    ("before", "category"),
    [
        # Nothing of the worker's own: it died without a trace, killed from outside.
        ([], "PROCESS_KILLED"),
        # A worker's own error before the teardown is the cause (FastChat#1937's CUDA OOM).
        (["CUDA out of memory. Tried to allocate 172.00 MiB (GPU 1; 22.38 GiB total capacity; 21.49 GiB already allocated; 62.56 MiB free; 21.69 GiB reserved in total by ",
          "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"],
         "CUDA_OOM"),
    ],
    ids=["teardown alone", "after a worker's own error"],
)  # fmt: skip
def test_a_deepspeed_teardown_with_no_worker_error_reads_as_a_kill_from_outside(tmp_path, before, category):
    verdict = _verdict_of(tmp_path, before + TEARDOWN)
    assert (verdict.category, verdict.state) == (category, "crashed")


def test_a_line_that_says_the_processes_wait_makes_a_hang_not_a_crash(tmp_path):
    """rllm#35 (real lines): Ray's autoscaler status with a placement group no node can hold."""
    lines = [
        "Pending:",
        " (no pending nodes)",
        "Usage:",
        " 0.0/112.0 CPU",
        " 0.0/1.0 GPU",
        "Demands:",
        " {'GPU': 1.0, 'CPU': 1.0} * 8 (STRICT_PACK): 1+ pending placement groups",
    ]
    verdict = _verdict_of(tmp_path, lines)
    assert (verdict.category, verdict.state) == ("ENVIRONMENT", "hung")


# yalueliu/Search-R1#134 (real lines): a vLLM worker crashed on SIGFPE; Ray then reports its worker dead.
RAY_WORKER_CRASHED = [
    "(WorkerDict pid=358504) Fatal Python error: Floating point exception",
    "(WorkerDict pid=358504) ",
    "(WorkerDict pid=358504) Stack (most recent call first):",
    '(WorkerDict pid=358504)   File "/data/miniconda3/envs/searchr1/lib/python3.9/site-packages/vllm/model_executor/layers/logits_processor.py", line 83 in _get_logits',
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.",
    "(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker.",
]


def test_a_worker_that_crashed_on_its_own_signal_was_not_killed_from_outside(tmp_path):
    verdict = _verdict_of(tmp_path, RAY_WORKER_CRASHED)
    assert (verdict.category, verdict.state) == ("UNKNOWN", "crashed")
    assert "Floating point exception" in verdict.first_failure["text"]
    assert "PROCESS_KILLED" in [h.category for h in verdict.hypotheses]


def test_an_abort_is_no_crash_of_its_own_and_a_bare_worker_death_stays_a_kill(tmp_path):
    aborted = [RAY_WORKER_CRASHED[0].replace("Floating point exception", "Aborted"), *RAY_WORKER_CRASHED[1:]]
    assert _verdict_of(tmp_path, aborted).category == "PROCESS_KILLED"
