"""Health needs proof; numerics from the metrics; tracebacks nobody recognizes. Real lines from public logs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics.flow import analyze
from forensics.ingest.metrics import extract_metrics
from forensics.passes.health import abrupt_stops, health_proofs
from forensics.passes.numerics import numerical_findings, numerics_table
from forensics.passes.traceback_context import classify_by_frames, uncaught_exceptions
from forensics.schema import FINDINGS, INPUTS
from tests.conftest import lines_frame

NANOGPT = [  # karpathy/nanoGPT#110: a healthy 8-GPU run, excerpt ends while it steps
    "iter 1639: loss 3.9185, time 562.66ms",
    "iter 1640: loss 3.6782, time 562.18ms",
    "iter 1641: loss 3.9748, time 567.31ms",
]
MEGATRON_STOPPED = [  # Megatron iteration lines, then something else, and no more steps
    " iteration       10/ 1000000 | consumed samples:           40 | elapsed time per iteration (ms): 356.2 | learning rate: 0.000E+00 |",
    "saving checkpoint at iteration      10 to /ckpt",
    "  successfully saved checkpoint at iteration      10 to /ckpt",
    "[before the start of training step] datetime: 2022-10-31 08:35:51 ",
    "some other output",
    "more output",
    "the last line",
]
NO_FINDINGS = pl.DataFrame(schema=FINDINGS)


def _inputs(path: str, cut: bool) -> pl.DataFrame:
    return pl.DataFrame([{"path": path, "kind": "console_log", "cut_mid_line": cut}], schema=INPUTS)


def test_a_run_still_stepping_at_the_end_of_its_log_is_proof_of_progress():
    lines = lines_frame(NANOGPT)
    proofs = health_proofs(lines, extract_metrics(lines), NO_FINDINGS)
    assert proofs["kind"].to_list() == ["progressing"]
    assert proofs["line"].to_list() == [3]


HF_BAR = [  # hiyouga/LlamaFactory#8939: the Trainer's bar after checkpoint-100 was saved
    " 84%|████████▍ | 101/120 [01:07<03:28, 10.97s/it]",
    " 85%|████████▌ | 102/120 [01:07<02:18,  7.71s/it]",
    " 86%|████████▌ | 103/120 [01:08<01:33,  5.50s/it]",
]


def test_a_training_bar_still_advancing_at_the_end_is_progress_and_a_stuck_bar_is_not():
    lines = lines_frame(HF_BAR)
    assert health_proofs(lines, extract_metrics(lines), NO_FINDINGS)["kind"].to_list() == ["progressing"]
    stuck = lines_frame([HF_BAR[0]] * 3)
    assert health_proofs(stuck, extract_metrics(stuck), NO_FINDINGS).is_empty()


MINDSPORE_SIX_WRITERS = [  # mindspore-lab/mindaudio#92: six processes print each step's loss into one log
    "epoch: 1 step: 35, loss is 514.43310546875",
    "epoch: 1 step: 35, loss is 541.4406127929688",
    "epoch: 1 step: 35, loss is 557.6650390625",
    "epoch: 1 step: 35, loss is 292.83624267578125",
    "epoch: 1 step: 35, loss is 522.20654296875",
    "epoch: 1 step: 35, loss is 521.9188842773438",
    "epoch: 1 step: 36, loss is 438.53326416015625",
    "epoch: 1 step: 36, loss is 378.19488525390625",
    "epoch: 1 step: 36, loss is 435.86273193359375",
    "epoch: 1 step: 36, loss is 570.6893310546875",
    "epoch: 1 step: 36, loss is 491.56768798828125",
    "epoch: 1 step: 36, loss is 501.5151672363281",
]


def test_several_writers_logging_each_step_are_progress_and_a_last_step_repeated_more_is_not():
    lines = lines_frame(MINDSPORE_SIX_WRITERS)
    assert health_proofs(lines, extract_metrics(lines), NO_FINDINGS)["line"].to_list() == [12]
    stuck = lines_frame(MINDSPORE_SIX_WRITERS[5:7] + MINDSPORE_SIX_WRITERS[6:7] * 4)
    assert health_proofs(stuck, extract_metrics(stuck), NO_FINDINGS).is_empty()


ONE_LINE_OF_A_LONG_RUN = [  # one progress line pasted from a run far along, each from a public thread
    "[2023-01-15 19:09:56,641] [INFO] [logging.py:68:log_dist] [Rank 0] step=2500, skipped=0, lr=[0.05], mom=[(0.9, 0.999)]",
    " iteration       10/ 1000000 | consumed samples:           40 | elapsed time per iteration (ms): 356.2 | learning rate: 0.000E+00 |",
    "2024-05-17 01:48:24,230 INFO [train.py:1034] (0/8) Epoch 1, batch 50, loss[loss=1.621, simple_loss=1.207, pruned_loss=1.377, ctc_loss=1.301, over 49372.00 frames. ], tot_loss[loss=3.721, simple_loss=3.037, pruned_loss=2.626, ctc_loss=2.074, over 2196903.96 frames. ], batch size: 138, lr: 2.48e-02, grad_scale: 0.125",
]


def test_one_progress_line_far_into_a_run_attests_the_steps_its_counter_shows():
    # DeepSpeed (deepspeed#2302), Megatron (nccl#743), icefall (icefall#1628): the counter says the
    # loop has turned 2500, 10, 50 times, and the excerpt ends on it.
    for text in ONE_LINE_OF_A_LONG_RUN:
        lines = lines_frame(["some setup output", text])
        assert health_proofs(lines, extract_metrics(lines), NO_FINDINGS)["kind"].to_list() == ["progressing"], text
    # Two steps from the start are not yet a run going on.
    early = lines_frame([NANOGPT[0].replace("1639", "1"), NANOGPT[1].replace("1640", "2")])
    assert health_proofs(early, extract_metrics(early), NO_FINDINGS).is_empty()


def test_a_log_cut_mid_line_is_an_abrupt_stop_and_no_proof():
    lines = lines_frame(NANOGPT)
    stops = abrupt_stops(_inputs("rank_0.log", cut=True), lines, extract_metrics(lines), NO_FINDINGS)
    assert stops["pattern"].to_list() == ["STOP001"] and stops["line"].to_list() == [3]
    assert health_proofs(lines, extract_metrics(lines), stops).is_empty()


def test_a_run_that_stops_stepping_short_of_its_total_is_flagged_weakly():
    lines = lines_frame(MEGATRON_STOPPED)
    stops = abrupt_stops(_inputs("rank_0.log", cut=False), lines, extract_metrics(lines), NO_FINDINGS)
    assert stops.select("pattern", "line", "severity").rows() == [("STOP002", 1, "warning")]
    assert json.loads(stops["captures"][0]) == {"step": 10, "total": 1000000}


def _numerical(lines):
    metrics = extract_metrics(lines)
    return numerical_findings(numerics_table(metrics), metrics, lines)


def test_nan_loss_for_many_steps_is_numerical_from_its_first_line():
    # lion-pytorch#9 style: loss explodes, then is nan every epoch while training goes on
    lines = lines_frame(
        ["E5 iter[ 14/ 15] | [Loss] 51566519.44", "E6 iter[ 14/ 15] | [Loss] nan | [exp] ./exp/0125/car", "E7 iter[ 14/ 15] | [Loss] nan"]
    )
    found = _numerical(lines)
    assert found.select("pattern", "line", "category", "role").rows() == [("METRIC001", 2, "NUMERICAL", "initiating")]
    assert found["rank"].to_list() == [None]  # one rank logs an all-reduced loss: no culprit


def test_loss_scale_collapse_is_numerical_and_a_stable_scale_is_not():
    collapsing = lines_frame(
        [
            "[2023-11-07 01:55:08,040] [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 65536.0, reducing to 32768.0",
            "NOTE: overflow detected, setting loss scale to: 0.000244140625",
        ]
    )
    assert _numerical(collapsing)["pattern"].to_list() == ["METRIC002"]
    stable = lines_frame(["[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 65536.0, reducing to 32768.0"])
    assert _numerical(stable).is_empty()


CUT_TRACEBACK = [  # deepspeedai/DeepSpeed#7650: the excerpt ends inside save_checkpoint's traceback
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/home/yanzhen/miniconda3/envs/deepspeed/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 3505, in save_checkpoint',
    "[rank0]:     self._save_zero_checkpoint(save_dir, tag)",
    '[rank0]:   File "/home/yanzhen/miniconda3/envs/deepspeed/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 2335, in state_dict',
    "[rank0]:     state_dict[BASE_OPTIMIZER_STATE] = self._get_base_optimizer_state()",
]


def test_a_traceback_cut_before_its_exception_is_judged_by_its_frames(incident):
    folder = incident({"console.log": "\n".join(CUT_TRACEBACK) + "\n"})
    verdict = analyze(folder).verdict
    assert verdict.category == "CHECKPOINT_IO"
    assert verdict.first_failure["line"] == 5


def test_unrecognized_and_cut_tracebacks_are_failure_evidence(incident):
    keyerror = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 3, in <module>',
        "[rank1]: KeyError: 'labels'",
    ]
    lines = lines_frame(keyerror, rank=1)
    assert classify_by_frames(lines, NO_FINDINGS).is_empty()
    found = uncaught_exceptions(lines, NO_FINDINGS)
    assert found.select("pattern", "line", "category", "role").rows() == [("EXC001", 3, "UNKNOWN", "symptom")]
    cut = lines_frame(keyerror[:2], rank=1)
    assert uncaught_exceptions(cut, NO_FINDINGS)["pattern"].to_list() == ["EXC002"]
    lone_header = lines_frame(keyerror[:1], rank=1)
    assert uncaught_exceptions(lone_header, NO_FINDINGS).is_empty()


def test_no_evidence_either_way_is_unknown_and_a_completion_line_is_healthy(incident):
    unknown = analyze(incident({"console.log": "loading model\nbuilding dataset\n"})).verdict
    assert (unknown.category, unknown.state) == ("UNKNOWN", "unknown")
    done = analyze(
        incident({"console.log": "loading model\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n"})
    ).verdict
    assert (done.category, done.state) == ("NO_FAILURE", "healthy")
    assert done.confidence < 0.9  # one kind of proof only


AXOLOTL_BUSY_RANK0 = [  # axolotl-ai-cloud/axolotl#2684: rank 0 tokenizes, rank 1's store wait times out
    "Tokenizing Prompts (num_proc=64):  92%|█████████▏| 328986/359152 [29:58<12:05, 41.59 examples/s][rank1]:[W516 14:34:56.853490829 socket.cpp:464] [c10d] waitForInput: poll for socket SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:29500) returned 0, likely a timeout",
    "[rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] waitForInput: socket SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:29500) timed out after 1800000ms",
]


def test_rank_zero_busy_preprocessing_is_the_rank_the_others_waited_for(incident):
    verdict = analyze(incident({"console.log": "\n".join(AXOLOTL_BUSY_RANK0) + "\n"})).verdict
    assert (verdict.category, verdict.culprit_ranks, verdict.state) == ("COLLECTIVE_TIMEOUT", [0], "hung")
    assert verdict.first_failure["line"] == 1 and "Tokenizing Prompts" in verdict.first_failure["text"]
    assert "waited for 1,800 s (console.log:2)" in verdict.summary  # the timeout rank 0 was given, cited


def _sd_scripts_caching_latents() -> list[str]:
    """kohya-ss/sd-scripts#971 as posted: rank 0 caches latents under a bare tqdm bar (its label on
    the line above), and rank 1's watchdog message is glued to the end of that bar."""
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "public" / "sd_scripts_971_caching_latents_rank0_over_30min_rank1_watchdog"
    return (folder / "console.log").read_text(encoding="utf-8").splitlines()[:13]


def test_a_bare_bar_takes_its_phase_from_the_line_above_and_stays_rank_zero_s_when_a_timeout_is_glued_to_it(incident):
    lines = _sd_scripts_caching_latents()
    assert lines[7] == "caching latents..." and lines[8].startswith(" 87%|") and "[Rank 1] Watchdog caught" in lines[8]
    verdict = analyze(incident({"console.log": "\n".join(lines) + "\n"})).verdict
    assert (verdict.category, verdict.culprit_ranks, verdict.state) == ("COLLECTIVE_TIMEOUT", [0], "hung")
    assert "waited for 1,800 s" in verdict.summary
    # The same bar under an unrelated label says nothing about preprocessing.
    relabelled = [("validating checkpoint" if t == "caching latents..." else t) for t in lines]
    findings = analyze(incident({"console.log": "\n".join(relabelled) + "\n"})).incident.findings
    assert "HANG006" not in findings["pattern"].to_list()


YOLOV5_LABEL_SCAN = [  # ultralytics/yolov5#4400: rank 0 scans and caches the labels; ranks 1-3 hit the 60 s watchdog
    "train: Scanning '../coco/labels/train' images and labels...43718 found, 110 missing, 0 empty, 7 corrupted:  97%|██▉| 43830/45049 [01:07<00:18, 66.12it/s][E ProcessGroupNCCL.cpp:567] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=60000) ran for 67438 milliseconds before timing out.",
    "[E ProcessGroupNCCL.cpp:567] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=60000) ran for 67434 milliseconds before timing out.",
    "[E ProcessGroupNCCL.cpp:567] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=60000) ran for 67441 milliseconds before timing out.",
]


def test_a_long_labelled_bar_with_another_rank_s_timeout_glued_after_it_is_rank_zero_s(incident):
    verdict = analyze(incident({"console.log": "\n".join(YOLOV5_LABEL_SCAN) + "\n"})).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("COLLECTIVE_TIMEOUT", [0])
    assert verdict.first_failure["line"] == 1 and "Scanning '../coco/labels/train'" in verdict.first_failure["text"]


def test_the_configured_timeout_is_read_in_every_unit_the_waiting_lines_use():
    from forensics.passes.busy_rank import _configured_timeout

    texts = {
        "[rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] waitForInput: socket SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:29500) timed out after 1800000ms": 1800,
        "[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=749, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800073 milliseconds before timing out.": 1800,
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 1, for key: store_based_barrier_key:1 (world_size=8, worker_count=2, timeout=0:30:00)": 1800,
        "Loading the dataset, then waiting 30 seconds": None,
    }
    for text, seconds in texts.items():
        found = _configured_timeout(lines_frame([text]))
        assert (found["seconds"] if found else None) == seconds, text


def test_no_busy_rank_when_rank_zero_timed_out_too(incident):
    both = AXOLOTL_BUSY_RANK0 + [line.replace("[rank1]", "[rank0]") for line in AXOLOTL_BUSY_RANK0[1:]]
    findings = analyze(incident({"console.log": "\n".join(both) + "\n"})).incident.findings
    assert "HANG006" not in findings["pattern"].to_list()


def test_the_protocol_s_own_lines_give_rank_step_and_loss_and_a_nan_run_that_completes_is_numerical(incident):
    # `[Rank r/W] ... Step N, Loss: X` and `NaN loss detected at step N`: the investigation protocol's formats.
    steps = [f"[Rank 3/8] Step {i}, Loss: {2.31 - i / 100:.2f}" for i in range(1, 40)]
    steps += [f"[Rank 3/8] Step {i}, Loss: nan" for i in range(40, 101)]
    text = "\n".join(steps + ["NaN loss detected at step 40", "Training completed. Total training time: 0:41:02"]) + "\n"
    analysis = analyze(incident({"train.log": text}))
    metrics = analysis.incident.metrics
    tagged = metrics.drop_nulls("rank")  # the untagged `NaN loss detected` line stays rankless
    assert tagged["rank"].unique().to_list() == [3] and tagged.height == 100 and tagged["step"].max() == 100
    assert (analysis.verdict.category, analysis.verdict.state) == ("NUMERICAL", "diverged")
    assert "NUM018" in analysis.incident.findings["pattern"].to_list()


def test_a_gradient_norm_far_above_its_recent_median_is_an_explosion_and_steady_noise_is_not():
    # Megatron's iteration line (reference/formats.md 6) with the grad norm of a run that blows up at step 31.
    norms = [0.23 + 0.05 * (i % 4) for i in range(1, 31)] + [87.5, 1.2e4]
    texts = [f" iteration {i:8d}/  250000 | lm loss: 2.50E+00 | loss scale: 1.0 | grad norm: {g:.3f} |" for i, g in enumerate(norms, 1)]
    lines = lines_frame(texts)
    found = _numerical(lines)
    assert found.select("pattern", "line", "category").rows() == [("METRIC003", 31, "NUMERICAL")]
    steady = lines_frame(texts[:30])
    assert _numerical(steady).is_empty()


MMDET_BLOWN_UP = [  # open-mmlab/mmdetection#3446: the first two intervals already show absurd norms
    "2020-07-31 22:40:50,985 - mmdet - INFO - Epoch [1][50/1749]\tlr: 1.978e-03, eta: 2:36:29, time: 1.807, data_time: 0.047, memory: 5280, loss_rpn_cls: 42030.6097, loss: 59307.8674, grad_norm: 3801898445783.2651",
    "2020-07-31 22:42:19,569 - mmdet - INFO - Epoch [1][100/1749]\tlr: 3.976e-03, eta: 2:33:29, time: 1.772, data_time: 0.004, memory: 5280, loss_rpn_cls: 6671.9864, loss: 21082.3080, grad_norm: 40558643632.8485",
]


def test_a_gradient_norm_past_any_trained_network_s_is_an_explosion_without_calm_norms_before_it():
    found = _numerical(lines_frame(MMDET_BLOWN_UP))
    assert found.select("pattern", "line").rows() == [("METRIC003", 1)]
    # icefall's scaled grad-norm quartiles reach 1.5e4 in a healthy run (icefall#1628): not absurd.
    healthy = [line.replace("3801898445783.2651", "15403.2").replace("40558643632.8485", "9881.758") for line in MMDET_BLOWN_UP]
    assert _numerical(lines_frame(healthy)).is_empty()


LITGPT_JUMP = [  # Lightning-AI/litgpt#628: a full finetune whose loss jumps at iter 1152 and stays up
    "iter 1151 step 144: loss 1.7019, iter time: 1106.53ms (optimizer.step)",
    "iter 1152 step 144: loss 11.4630, iter time: 1260.82ms",
    "iter 1153 step 144: loss 11.7545, iter time: 1109.35ms",
    "iter 1154 step 144: loss 11.5019, iter time: 901.24ms",
    "iter 1155 step 144: loss 11.4807, iter time: 1019.36ms",
    "iter 1156 step 144: loss 12.1935, iter time: 978.51ms",
    "iter 1157 step 144: loss 10.0220, iter time: 1022.02ms",
]


def test_a_loss_that_jumps_several_fold_and_stays_up_is_numerical_and_a_spike_that_recovers_is_not():
    found = _numerical(lines_frame(LITGPT_JUMP))
    assert found.select("pattern", "line").rows() == [("METRIC011", 2)]
    recovered = LITGPT_JUMP[:3] + [
        line.replace("loss 11.50", "loss 1.650").replace("loss 11.48", "loss 1.648") for line in LITGPT_JUMP[3:5]
    ]
    recovered += [LITGPT_JUMP[0].replace("iter 1151", "iter 1158"), LITGPT_JUMP[0].replace("iter 1151", "iter 1159")]
    assert "METRIC011" not in _numerical(lines_frame(recovered))["pattern"].to_list()
    # Too few logs after the jump to say it stayed.
    assert _numerical(lines_frame(LITGPT_JUMP[:4])).is_empty()


CAFFE_CLIMB = [  # wy1iu/sphereface#103: Caffe's solver lines, the loss rising at a fixed learning rate
    "I0718 05:26:01.970777 23375 solver.cpp:237]     Train net output #1: softmax_loss = 35.8096 (* 1 = 35.8096 loss)",
    "I0718 05:26:01.970809 23375 sgd_solver.cpp:105] Iteration 23400, lr = 0.0001",
    "I0718 05:27:41.934793 23375 solver.cpp:218] Iteration 23500 (1.00034 iter/s, 99.9662s/100 iters), loss = 38.7695",
    "I0718 05:27:41.935073 23375 solver.cpp:237]     Train net output #0: lambda = 5",
    "I0718 05:27:41.935127 23375 solver.cpp:237]     Train net output #1: softmax_loss = 38.7695 (* 1 = 38.7695 loss)",
    "I0718 05:27:41.935158 23375 sgd_solver.cpp:105] Iteration 23500, lr = 0.0001",
    "I0718 05:29:22.286622 23375 solver.cpp:218] Iteration 23600 (0.996475 iter/s, 100.354s/100 iters), loss = 43.6644",
    "I0718 05:29:22.286840 23375 solver.cpp:237]     Train net output #0: lambda = 5",
    "I0718 05:29:22.286864 23375 solver.cpp:237]     Train net output #1: softmax_loss = 43.6644 (* 1 = 43.6644 loss)",
    "I0718 05:29:22.286880 23375 sgd_solver.cpp:105] Iteration 23600, lr = 0.0001",
    "I0718 05:31:02.214758 23375 solver.cpp:218] Iteration 23700 (1.0007 iter/s, 99.9301s/100 iters), loss = 47.6553",
    "I0718 05:31:02.214937 23375 solver.cpp:237]     Train net output #0: lambda = 5",
    "I0718 05:31:02.214952 23375 solver.cpp:237]     Train net output #1: softmax_loss = 47.6553 (* 1 = 47.6553 loss)",
    "I0718 05:31:02.214964 23375 sgd_solver.cpp:105] Iteration 23700, lr = 0.0001",
]


def test_a_loss_that_only_climbs_is_no_proof_of_health():
    def proofs(lines):
        return health_proofs(lines_frame(lines), extract_metrics(lines_frame(lines)), pl.DataFrame(schema=FINDINGS))["kind"].to_list()

    assert proofs(CAFFE_CLIMB) == []
    falling = [line.replace("loss = 43.6644", "loss = 30.1234") for line in CAFFE_CLIMB]
    assert proofs(falling) == ["progressing"]
    # A rise that is not the whole excerpt (a GAN's loss settling after falling) leaves the proof standing.
    settled = [line.replace("Iteration 23500 (", "Iteration 23400 (") for line in CAFFE_CLIMB if "Iteration 23500 (" in line]
    assert proofs([settled[0].replace("loss = 38.7695", "loss = 90.5")] + CAFFE_CLIMB) == ["progressing"]


# PaddlePaddle/PaddleDetection#6048 (real lines): PP-YOLOE's loss during its learning-rate warm-up.
PPYOLOE_WARMUP = [
    "[05/24 16:55:42] ppdet.engine INFO: Epoch: [0] [  0/166] learning_rate: 0.000000 loss: 4.831001 loss_cls: 1.623000 loss_iou: 0.746897 loss_dfl: 2.681520 loss_l1: 2.082105 eta: 16:21:30 batch_cost: 1.1825 data_cost: 0.1905 ips: 2.5369 images/s",
    "[05/24 17:00:25] ppdet.engine INFO: Epoch: [0] [100/166] learning_rate: 0.004217 loss: 4.718459 loss_cls: 2.129966 loss_iou: 0.665714 loss_dfl: 2.090601 loss_l1: 2.087489 eta: 1 day, 12:32:16 batch_cost: 2.6612 data_cost: 1.5758 ips: 1.1273 images/s",
    "[05/24 17:03:29] ppdet.engine INFO: Epoch: [1] [  0/166] learning_rate: 0.007000 loss: 8.422877 loss_cls: 5.889220 loss_iou: 0.651913 loss_dfl: 2.083613 loss_l1: 2.060118 eta: 1 day, 12:22:24 batch_cost: 2.5678 data_cost: 1.3366 ips: 1.1683 images/s",
    "[05/24 17:07:54] ppdet.engine INFO: Epoch: [1] [100/166] learning_rate: 0.011217 loss: 21.496906 loss_cls: 19.170841 loss_iou: 0.541128 loss_dfl: 1.721369 loss_l1: 1.121590 eta: 1 day, 11:31:50 batch_cost: 2.4889 data_cost: 1.3846 ips: 1.2054 images/s",
]
# huggingface/datasets#7440 (real lines): a streaming run whose last words are reads timing out.
STREAMING_TIMEOUTS = [
    "{'loss': 2.8503, 'grad_norm': 0.35816267132759094, 'learning_rate': 0.001, 'epoch': 0.11, 'num_input_tokens_seen': 938475520}",
    "{'loss': 3.0328, 'grad_norm': 0.3540339469909668, 'learning_rate': 0.001, 'epoch': 0.11, 'num_input_tokens_seen': 939524096}",
    "[2025-03-11 03:46:08 WARNING] Retrying in 1s [Retry 1/5].",
]


def _proofs(texts: list[str]) -> list[str]:
    lines = lines_frame(texts)
    return health_proofs(lines, extract_metrics(lines), pl.DataFrame(schema=FINDINGS))["kind"].to_list()


def test_a_loss_that_ends_on_its_highest_at_twice_its_lowest_is_no_proof_of_health():
    assert _proofs(PPYOLOE_WARMUP) == []
    calmer = [line.replace("loss: 21.496906", "loss: 4.496906") for line in PPYOLOE_WARMUP]
    assert _proofs(calmer) == ["progressing"]


def test_a_run_whose_last_lines_are_retries_is_no_proof_of_health():
    stepping = [STREAMING_TIMEOUTS[0]] * 2 + STREAMING_TIMEOUTS[:2]
    assert _proofs(stepping) == ["progressing"]
    assert _proofs(stepping + STREAMING_TIMEOUTS[2:]) == []


OLMO_STEPS = [  # allenai/OLMo#692: OLMo's metric block, one value per line under the step header
    "2024-08-06 09:59:26.181 intern-studio-160750:0  olmo.train:908  INFO    [step=1/739328,epoch=0]",
    "    optim/total_grad_norm=231.7",
    "    train/CrossEntropyLoss=12.18",
    "2024-08-06 10:00:05.520 intern-studio-160750:0  olmo.train:908  INFO    [step=2/739328,epoch=0]",
    "    optim/total_grad_norm=0.0002",
    "    train/CrossEntropyLoss=1.7872662283480167e-06",
    "2024-08-06 10:00:44.815 intern-studio-160750:0  olmo.train:908  INFO    [step=3/739328,epoch=0]",
    "    optim/total_grad_norm=7.725906669975302e-08",
    "    train/CrossEntropyLoss=0.0",
]
NANOTRON = [  # huggingface/nanotron#390: nanotron's iteration line
    "10/17/2025 16:31:56 [INFO|DP=0|PP=0|TP=0]: iteration: 327281 / 378950 | consumed_tokens: 85.8G | elapsed_time_per_iteration_ms: 11.5K | tokens_per_sec: 22.8K | tokens_per_sec_per_gpu: 11.4K | global_batch_size: 64 | lm_loss: 2.38 | lr: 1e-05 |",
]


def test_olmo_and_nanotron_lines_give_their_losses_and_steps():
    olmo = extract_metrics(lines_frame(OLMO_STEPS))
    assert olmo.drop_nulls("loss")["loss"].to_list() == [12.18, 1.7872662283480167e-06, 0.0]
    assert olmo.drop_nulls("step")["step"].to_list() == [1, 2, 3]
    nanotron = extract_metrics(lines_frame(NANOTRON))
    assert nanotron.select("step", "loss").rows() == [(327281, 2.38)]


def test_a_loss_that_falls_to_effectively_zero_in_one_interval_is_a_collapse():
    found = _numerical(lines_frame(OLMO_STEPS))
    assert ("METRIC010", 6) in found.select("pattern", "line").rows()
    # A loss that creeps down to 0.3 is training, not a collapse.
    slow = [line.replace("1.7872662283480167e-06", "0.41").replace("=0.0", "=0.30") for line in OLMO_STEPS]
    assert "METRIC010" not in _numerical(lines_frame(slow))["pattern"].to_list()


def test_progress_counts_steps_since_the_step_counter_last_went_back(incident):
    # rwth-i6/returnn#1485: a global step on the epoch line, then two epoch-local steps from four
    # workers. Two steps are not yet a run going on, whatever the global counter said.
    returnn = Path(__file__).resolve().parents[1] / "fixtures" / "public" / "returnn_1485_slow_epoch_4gpu_hardware_suspected"
    lines = (returnn / "console.log").read_text(encoding="utf-8")
    assert "global train step 49983" in lines
    verdict = analyze(incident({"console.log": lines})).verdict
    assert (verdict.category, verdict.state) == ("UNKNOWN", "unknown")
    # A restart from a checkpoint that then keeps stepping is progress again.
    titan = (
        "[rank0]:[titan] 2025-03-12 11:10:{s:02d},511 - root - INFO - step: {step}  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831\n"
    )
    before = "".join(titan.format(s=s, step=s) for s in range(1, 10))
    after = "".join(titan.format(s=30 + s, step=s) for s in range(5, 9))
    restarted = analyze(incident({"console.log": before + after})).verdict
    assert (restarted.category, restarted.state) == ("NO_FAILURE", "healthy")
    too_soon = analyze(incident({"console.log": before + "".join(titan.format(s=30 + s, step=s) for s in range(5, 7))})).verdict
    assert too_soon.state == "unknown"


def _loss_lines(losses, lr=None):
    """Megatron iteration lines (reference/formats.md 6.1) carrying `losses`, one per step."""
    return lines_frame(
        [
            f" iteration {i:8d}/  250000 | learning rate: 3.000E-04 | lm loss: {loss:.6E} | loss scale: 1.0 |"
            for i, loss in enumerate(losses, 1)
        ]
    )


def _noisy_curve(seed, steps=400, start=10.5, floor=2.8, noise=0.03):
    """A pretraining loss: exponential decay to a floor, with multiplicative noise."""
    import math
    import random

    rnd = random.Random(seed)
    return [(floor + (start - floor) * math.exp(-i / 60)) * (1 + rnd.gauss(0, noise)) for i in range(steps)]


@pytest.mark.parametrize("seed", range(8))
def test_a_noisy_healthy_loss_curve_has_no_spike_and_no_divergence(seed):
    assert numerics_table(extract_metrics(_loss_lines(_noisy_curve(seed)))).is_empty()


@pytest.mark.parametrize("seed", range(4))
def test_a_loss_that_climbs_back_and_stays_up_diverges_from_its_onset(seed):
    curve = _noisy_curve(seed, steps=200)
    blown = curve[:150] + [curve[149] * (1.5 + 0.2 * i) for i in range(50)]  # learning rate blow-up at step 151
    lines = _loss_lines(blown)
    found = _numerical(lines)
    divergence = found.filter(pl.col("pattern") == "METRIC005")
    assert divergence.height == 1 and divergence["severity"][0] == "error"
    step = json.loads(divergence["captures"][0])["step"]
    assert 151 <= step <= 160  # the smoothed loss crosses twice its best within a few steps of the blow-up


def test_one_spike_that_recovers_is_an_anomaly_not_a_failure():
    curve = _noisy_curve(3, steps=200)
    curve[120] = curve[119] * 4  # one bad batch
    found = _numerical(_loss_lines(curve))
    assert found.select("pattern", "line", "severity").rows() == [("METRIC004", 121, "info")]


def test_a_policy_loss_that_crosses_zero_is_not_judged_for_spikes_or_divergence():
    losses = [(-0.4 if i < 100 else 0.05) + 0.01 * (i % 3) for i in range(200)]
    assert numerics_table(extract_metrics(_loss_lines(losses))).is_empty()


def test_a_restart_does_not_read_as_divergence():
    curve = _noisy_curve(1, steps=200)
    restarted = _loss_lines(curve[:200]).vstack(_loss_lines(curve[:60]).with_columns(pl.col("line") + 200))
    assert numerics_table(extract_metrics(restarted)).filter(pl.col("kind") == "divergence").is_empty()


def _per_rank(rows):
    """(rank, step, loss) rows as each rank's own pipe-format log line."""
    frames = [
        lines_frame([f"step {step} | loss {loss} | avg_loss {loss}"], file=f"rank_{rank}.log", rank=rank) for rank, step, loss in rows
    ]
    return pl.concat(frames).with_columns(line=pl.int_range(1, pl.len() + 1).over("file"))


def test_the_rank_whose_loss_went_nan_while_its_peers_were_finite_is_named():
    rows = [(r, s, 2.3 - 0.01 * s) for s in (10, 11) for r in range(4)]
    rows += [(r, 12, "nan" if r == 3 else 2.18) for r in range(4)] + [(r, 13, "nan") for r in range(4)]
    found = _numerical(_per_rank(rows))
    assert found.select("pattern", "rank", "file").row(0) == ("METRIC001", 3, "rank_3.log")
    assert json.loads(found["captures"][0])["step"] == 12


def test_ranks_that_go_nan_at_the_same_step_name_no_culprit():
    rows = [(r, s, 2.3) for s in (10, 11) for r in range(4)] + [(r, 12, "nan") for r in range(4)]
    assert _numerical(_per_rank(rows))["rank"].to_list() == [None]


def test_a_log_of_fp16_overflow_notes_alone_is_not_proof_of_health():
    """Skipped steps are not progress: DeepSpeed's first overflows (reference/formats.md 6.2) prove nothing."""
    lines = lines_frame(
        [
            "[2024-07-17 19:44:06,829] [INFO] [loss_scaler.py:190:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2. Reducing hysteresis to 1",
            "[2024-07-17 19:44:06,945] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
            "[2021-02-04 15:06:19,825] [INFO] [stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 134217728.0, reducing to 67108864.0",
        ]
    )
    assert health_proofs(lines, extract_metrics(lines), NO_FINDINGS).is_empty()


def test_a_grad_scale_near_zero_is_a_collapse_and_a_small_starting_scale_is_not():
    """icefall logs torch's GradScaler scale, which it starts at 1.0: 0.125 early on is ordinary, 1e-26 is not."""
    collapsed = lines_frame(["2024-01-14 01:03:00,826 WARNING [train.py:1057] (2/4) Grad scale is small: 1.2924697071141057e-26"])
    assert _numerical(collapsed)["pattern"].to_list() == ["METRIC002"]
    ordinary = lines_frame(
        [
            "2024-05-17 01:48:24,230 INFO [train.py:1034] (0/8) Epoch 1, batch 50, loss[loss=1.621, simple_loss=1.207, pruned_loss=1.377, ctc_loss=1.301, over 49372.00 frames. ], tot_loss[loss=3.721, simple_loss=3.037, pruned_loss=2.626, ctc_loss=2.074, over 2196903.96 frames. ], batch size: 138, lr: 2.48e-02, grad_scale: 0.125"
        ]
    )
    metrics = extract_metrics(ordinary)
    assert metrics.select("step", "loss", "loss_scale").row(0) == (50, 1.621, 0.125)
    assert numerics_table(metrics).is_empty()


def test_a_loss_scale_driven_below_one_sixty_fourth_by_overflows_is_a_collapse():
    """fairseq#515: the scale halves from 0.0625 to 0.0039 while the loss still falls; fp16 gradients overflow unscaled."""
    lines = lines_frame(
        [
            "| WARNING: overflow detected, setting loss scale to: 0.0625",
            "| WARNING: overflow detected, setting loss scale to: 0.03125",
            "| WARNING: overflow detected, setting loss scale to: 0.015625",
            "| WARNING: overflow detected, setting loss scale to: 0.0078125",
        ]
    )
    found = numerics_table(extract_metrics(lines))
    assert found["kind"].to_list() == ["loss_scale_collapse"] and found["line"].to_list() == [4]


def test_an_average_loss_in_a_progress_bar_that_turns_nan_is_numerical():
    """sd-scripts prints its running average as `avr_loss=` in the tqdm postfix."""
    lines = lines_frame(
        ["steps:  29%|████████████████▋                                         | 943/3280 [18:48<46:37,  1.20s/it, avr_loss=nan]"]
    )
    assert _numerical(lines).select("pattern", "category").row(0) == ("METRIC001", "NUMERICAL")
    # Validation losses are not the training loss; the epoch the line names is read.
    assert extract_metrics(lines_frame(["epoch 3, val_loss=0.41, eval_loss: 0.40"])).select("epoch", "loss").rows() == [(3, None)]


def test_a_loss_stuck_at_its_start_is_a_plateau_only_when_logged_from_the_start():
    import random

    rnd = random.Random(2)
    stuck = [10.37 * (1 + rnd.gauss(0, 0.01)) for _ in range(60)]  # ln(32000): a model that learns nothing
    found = numerics_table(extract_metrics(_loss_lines(stuck)))
    assert found["kind"].to_list() == ["plateau"] and found["step"][0] == 5  # the first smoothed point
    mid_run = lines_frame([f" iteration {i:8d}/  250000 | lm loss: {loss:.6E} | loss scale: 1.0 |" for i, loss in enumerate(stuck, 5001)])
    assert numerics_table(extract_metrics(mid_run)).is_empty()  # an excerpt of a converged run is not judged
    assert numerics_table(extract_metrics(_loss_lines(_noisy_curve(2)))).is_empty()


# open-mmlab/mmdetection#1742: lr 0.02, the loss goes from 0.6 to 2.3e5 to 1.8e10 in four log lines.
MMDET_EXPLOSION = [
    "2019-12-03 13:36:58,567 - INFO - Epoch [6][3150/3681]\tlr: 0.02000, eta: 3:50:55, time: 0.924, data_time: 0.005, memory: 6147, loss_rpn_cls: 0.0431, loss_rpn_bbox: 0.0594, loss_cls: 0.2494, acc: 90.6348, loss_bbox: 0.2668, loss: 0.6186",
    "2019-12-03 13:37:26,314 - INFO - Epoch [6][3200/3681]\tlr: 0.02000, eta: 3:50:21, time: 0.555, data_time: 0.005, memory: 6147, loss_rpn_cls: 0.4505, loss_rpn_bbox: 0.1093, loss_cls: 0.2473, acc: 92.7031, loss_bbox: 0.2011, loss: 1.0083",
    "2019-12-03 13:37:43,641 - INFO - Epoch [6][3250/3681]\tlr: 0.02000, eta: 3:49:37, time: 0.347, data_time: 0.005, memory: 6147, loss_rpn_cls: 117119.4643, loss_rpn_bbox: 86211.9636, loss_cls: 18325.3354, acc: 83.0372, loss_bbox: 3535.8495, loss: 225192.6129",
    "2019-12-03 13:38:23,517 - INFO - Epoch [6][3300/3681]\tlr: 0.02000, eta: 3:49:16, time: 0.798, data_time: 0.005, memory: 6147, loss_rpn_cls: 91894506.7258, loss_rpn_bbox: 23305796.7583, loss_cls: 3989496427.8865, acc: 83.2261, loss_bbox: 13505982514.5904, loss: 17610679897.6990",
]


def test_a_loss_that_rises_by_orders_of_magnitude_explodes_even_in_a_short_excerpt():
    found = _numerical(lines_frame(MMDET_EXPLOSION))
    explosion = found.filter(pl.col("pattern") == "METRIC009")
    assert explosion.height == 1 and explosion["line"][0] == 3 and explosion["category"][0] == "NUMERICAL"
    assert json.loads(explosion["captures"][0])["step"] == 3250


# horovod/horovod#1737 (DeepLab under Horovod, two ranks in one console): rank 0's cross entropy is
# in the thousands while rank 1's is about 3; the excerpt starts after rank 0 blew up.
HOROVOD_RANK0_EXPLODED = [
    "[1,1]<stderr>:INFO:tensorflow:cross_entropy = 3.2162714, learning_rate = 0.013941194, train_mean_iou = 0.044501893, train_px_accuracy = 0.6036568 (7.317 sec)",
    "[1,0]<stderr>:INFO:tensorflow:cross_entropy = 3936.8564, learning_rate = 0.013941194, train_mean_iou = 0.039751776, train_px_accuracy = 0.5942941 (7.314 sec)",
    "[1,1]<stderr>:INFO:tensorflow:cross_entropy = 3.395734, learning_rate = 0.013936993, train_mean_iou = 0.044070747, train_px_accuracy = 0.60730934 (7.308 sec)",
    "[1,0]<stderr>:INFO:tensorflow:cross_entropy = 8630.3545, learning_rate = 0.013936993, train_mean_iou = 0.03948465, train_px_accuracy = 0.5968001 (7.309 sec)",
    "[1,1]<stderr>:INFO:tensorflow:cross_entropy = 11.08021, learning_rate = 0.0139327925, train_mean_iou = 0.043267388, train_px_accuracy = 0.61028844 (7.284 sec)",
    "[1,0]<stderr>:INFO:tensorflow:cross_entropy = 10853.728, learning_rate = 0.0139327925, train_mean_iou = 0.038815014, train_px_accuracy = 0.59665734 (7.285 sec)",
]


def _mpirun_ranks(texts: list[str]) -> pl.DataFrame:
    """One console with mpirun's `[1,R]<stderr>:` prefixes, each line's rank R."""
    return lines_frame(texts).with_columns(rank=pl.col("text").str.extract(r"^\[1,(\d+)\]").cast(pl.Int32))


def test_a_rank_whose_loss_sits_orders_of_magnitude_above_its_peers_exploded_and_is_named():
    lines = _mpirun_ranks(HOROVOD_RANK0_EXPLODED)
    explosion = _numerical(lines).filter(pl.col("pattern") == "METRIC009")
    assert explosion.height == 1 and explosion["rank"][0] == 0 and explosion["line"][0] == 4


def test_ranks_whose_losses_differ_by_their_batches_do_not_explode():
    tenfold = [line.replace("cross_entropy = 3936.8564", "cross_entropy = 39.368564") for line in HOROVOD_RANK0_EXPLODED]
    calm = [line for line in tenfold if "= 8630" not in line and "= 10853" not in line]
    assert _numerical(_mpirun_ranks(calm)).filter(pl.col("pattern") == "METRIC009").is_empty()


@pytest.mark.parametrize("seed", range(4))
def test_a_loss_that_falls_from_its_start_or_doubles_does_not_explode(seed):
    curve = _noisy_curve(seed, steps=200)
    doubled = curve[:150] + [value * 2 for value in curve[150:]]
    assert numerics_table(extract_metrics(_loss_lines(doubled))).filter(pl.col("kind") == "loss_explosion").is_empty()


# huggingface/transformers#14531 (T5-11B fp16 under DeepSpeed) and hiyouga/LLaMA-Factory#5627 (NPU), as posted.
ZERO_AFTER_T5 = [
    "{'loss': 6.2645, 'learning_rate': 0.001, 'epoch': 0.02}",
    "{'loss': 0.0, 'learning_rate': 0.001, 'epoch': 0.04}",
    "{'loss': 0.0, 'learning_rate': 0.001, 'epoch': 0.06}",
]
ZERO_AFTER_NPU = [
    "{'loss': 1.4596, 'grad_norm': nan, 'learning_rate': 4.552255167404752e-06, 'epoch': 0.66}",
    "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.549912997495027e-06, 'epoch': 0.66}",
    "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 4.549912997495027e-06, 'epoch': 0.66}",
]


@pytest.mark.parametrize("posted", [ZERO_AFTER_T5, ZERO_AFTER_NPU])
def test_a_loss_that_drops_straight_to_exactly_zero_has_collapsed(posted):
    found = numerics_table(extract_metrics(lines_frame(posted))).filter(pl.col("kind") == "loss_collapse")
    assert found["line"].to_list() == [2] and found["value"][0] == 0.0 and found["reference"][0] >= 1.0


def test_a_loss_that_reaches_zero_gradually_or_once_has_not_collapsed():
    overfit = [f"{{'loss': {value}, 'epoch': {i}}}" for i, value in enumerate([0.9, 0.3, 0.05, 0.004, 0.0, 0.0, 0.0])]
    once = ZERO_AFTER_T5[:2] + ["{'loss': 5.9811, 'learning_rate': 0.001, 'epoch': 0.06}"]
    for posted in (overfit, once):
        assert numerics_table(extract_metrics(lines_frame(posted))).filter(pl.col("kind") == "loss_collapse").is_empty()


FAIRSCALE_ASSERT = [  # facebookresearch/fairscale#571: a bare assert fails inside FSDP's lazy init
    '  File "/home/developer/miniconda/envs/pth17/lib/python3.7/site-packages/fairscale/nn/data_parallel/fully_sharded_data_parallel.py", line 636, in _lazy_init',
    "    self._init_param_attributes(p)",
    '  File "/home/developer/miniconda/envs/pth17/lib/python3.7/site-packages/fairscale/nn/data_parallel/fully_sharded_data_parallel.py", line 698, in _init_param_attributes',
    '    assert p._fp32_shard.device == torch.device("cpu")',
    "AssertionError",
]


def test_a_traceback_ending_in_a_bare_exception_name_crashed_and_its_asserted_device_names_the_category(incident):
    verdict = analyze(incident({"console.log": "\n".join(FAIRSCALE_ASSERT) + "\n"})).verdict
    assert (verdict.category, verdict.state) == ("DEVICE_MISMATCH", "crashed")
    # An assertion about something else is a crash no signature explains, still a crash.
    other = [line.replace('p._fp32_shard.device == torch.device("cpu")', "len(params) == 1") for line in FAIRSCALE_ASSERT]
    verdict = analyze(incident({"console.log": "\n".join(other) + "\n"})).verdict
    assert (verdict.category, verdict.state) == ("UNKNOWN", "crashed")


MXNET_EPOCHS = [  # kubeflow/kubeflow#68: MXNet's Speedometer, a batch counter that restarts each epoch
    "INFO:root:Epoch[1] Batch [60]   Speed: 2008.51 samples/sec      accuracy=0.347852",
    "INFO:root:Epoch[1] Batch [80]   Speed: 2001.21 samples/sec      accuracy=0.377051",
    "INFO:root:Epoch[1] Train-accuracy=0.397748",
    "INFO:root:Epoch[1] Time cost=24.828",
    "INFO:root:Epoch[1] Validation-accuracy=0.434570",
    "INFO:root:Epoch[2] Batch [20]   Speed: 1993.33 samples/sec      accuracy=0.410249",
    "INFO:root:Epoch[2] Batch [40]   Speed: 1989.81 samples/sec      accuracy=0.419043",
]


def test_a_counter_back_at_its_first_value_is_the_next_epoch_and_its_batches_count():
    lines = lines_frame(MXNET_EPOCHS)
    metrics = extract_metrics(lines)
    assert metrics.drop_nulls("step")["step"].to_list() == [60, 80, 20, 40]
    # The stream began at batch 60 and went back to 20, below that start: a new epoch, 40 batches in.
    assert health_proofs(lines, metrics, NO_FINDINGS)["kind"].to_list() == ["progressing"]
    # Back to 70, above where the stream began: a run resumed mid-way, two steps seen since.
    resumed = lines_frame([*MXNET_EPOCHS[:5], *(line.replace("[20]", "[70]").replace("[40]", "[71]") for line in MXNET_EPOCHS[5:])])
    assert health_proofs(resumed, extract_metrics(resumed), NO_FINDINGS).is_empty()


MEGATRON_SAVE_CUT = [  # NVIDIA/Megatron-LM#314: the excerpt stops inside the traceback of a checkpoint save
    " iteration      600/  500000 | consumed samples:         4800 | elapsed time per iteration (ms): 1549.5 | learning rate: 2.737E-05 | global batch size:     8 | lm loss: 6.348289E+00 | loss scale: 131072.0 | grad norm: 2.961 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "saving checkpoint at iteration     600 to customer_scripts/checkpoints/3b",
    "Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.8/dist-packages/torch/serialization.py", line 428, in save',
]


def test_a_traceback_cut_before_its_exception_line_still_ended_its_process(incident):
    verdict = analyze(incident({"console.log": "\n".join(MEGATRON_SAVE_CUT) + "\n"})).verdict
    assert (verdict.category, verdict.state) == ("CHECKPOINT_IO", "crashed")


def test_no_proof_of_health_while_another_rank_ends_on_errors_nobody_explains():
    # deepspeed#294: rank 0 keeps stepping while rank 290 repeats an error no pattern knew then.
    stepping = lines_frame(NANOGPT, file="console.log", rank=0)
    erring = lines_frame(["!!!! kernel execution error."] * 3, file="console.log", rank=290).with_columns(pl.col("line") + 10)
    lines = pl.concat([stepping, erring])
    assert health_proofs(lines, extract_metrics(lines), NO_FINDINGS).is_empty()
    # A warning logged as such (TensorFlow's end-of-fit notice, kubeflow/training-operator#1168) and a
    # metric named `error` (TOKEN#7's `Top1 error: 100.0000`) are no errors.
    benign = [
        "2020-06-08 05:30:15.889706: W tensorflow/core/kernels/data/generator_dataset_op.cc:103] Error occurred when finalizing GeneratorDataset iterator: Cancelled: Operation was cancelled",
        ">> Train Epoch: [0] [  20/4003] eta: 2:13:59 ArcFace loss: 17.6965 Top1 error: 100.0000 Top5 error: 100.0000 iter time: 2.0185 s max mem: 18134 MB",
    ]
    calm = pl.concat([stepping, lines_frame(benign, file="console.log", rank=1).with_columns(pl.col("line") + 10)])
    assert health_proofs(calm, extract_metrics(calm), NO_FINDINGS)["kind"].to_list() == ["progressing", "progressing"]


# epfLLM/Megatron-LLM#22 (real lines): the time per iteration climbing at every log.
MEGATRON_SLOWING = [
    " iteration       10/     600 | consumed samples:          640 | elapsed time per iteration (ms): 84606.2 | learning rate: 8.000E-06 | ",
    " iteration       15/     600 | consumed samples:          960 | elapsed time per iteration (ms): 142474.1 | learning rate: 1.200E-05 | ",
    " iteration       20/     600 | consumed samples:         1280 | elapsed time per iteration (ms): 202438.6 | learning rate: 1.600E-05 |",
]
# akanazawa/fpo#4 (real lines): evaluations keep coming while the reward they report is NaN.
NAN_REWARD = [
    "Eval metrics at step 0:",
    "  Reward: mean=3.06, min=1.92, max=10.06, std=1.38",
    "  Steps:  mean=1000.0, min=1000.0, max=1000.0, std=0.0",
    "Eval metrics at step 6:",
    "  Reward: mean=nan, min=nan, max=nan, std=nan",
    "  Steps:  mean=0.0, min=0.0, max=0.0, std=0.0",
    "Eval metrics at step 13:",
    "  Reward: mean=nan, min=nan, max=nan, std=nan",
    "  Steps:  mean=0.0, min=0.0, max=0.0, std=0.0",
]


def test_step_times_that_only_climb_are_no_proof_of_health():
    assert _proofs(MEGATRON_SLOWING) == []
    steady = [line.replace("142474.1", "84712.3").replace("202438.6", "84650.9") for line in MEGATRON_SLOWING]
    assert _proofs(steady) == ["progressing"]


def test_a_run_whose_last_lines_report_a_nan_value_is_no_proof_of_health():
    assert _proofs(NAN_REWARD) == []
    finite = [line.replace("mean=nan, min=nan, max=nan, std=nan", "mean=3.11, min=1.90, max=9.87, std=1.41") for line in NAN_REWARD]
    assert _proofs(finite) == ["progressing"]


# Neuron_SP#2 (real lines, abridged by its poster): a step line, then the watchdog's timeout wrapped over three lines.
STEP_THEN_TIMEOUT = [
    "[DESLOC] Step 90/500 | Loss: 8.2812 | Time: 3531.7ms",
    "",
    "[rank0]:[E424 04:11:42] Watchdog caught collective operation timeout:",
    "WorkNCCL(SeqNum=71, OpType=ALLREDUCE, NumelIn=773615360,",
    "Timeout(ms)=600000) ran for 600050 milliseconds before timing out.",
]


def test_a_step_line_before_a_watchdog_timeout_is_no_proof_of_health(tmp_path):
    from forensics.flow import analyze

    assert _proofs(STEP_THEN_TIMEOUT) == []
    (tmp_path / "console.log").write_text("\n".join(STEP_THEN_TIMEOUT) + "\n")
    verdict = analyze(tmp_path).verdict
    assert (verdict.category, verdict.state) == ("COLLECTIVE_TIMEOUT", "hung")


SNOWFALL_EPOCHS = [  # k2-fsa/snowfall#152: a DDP run that logs one line per epoch and no loss
    "2021-04-10 23:36:00,287 INFO [mmi_bigram_train.py:401] epoch 0, learning rate 0.001",
    "2021-04-11 00:06:37,689 INFO [common.py:201] write training info to exp-lstm-adam-mmi-bigram-musan-dist/epoch-0-info",
    "2021-04-11 00:06:37,690 INFO [mmi_bigram_train.py:401] epoch 1, learning rate 0.001",
    "2021-04-11 00:37:08,277 INFO [common.py:201] write training info to exp-lstm-adam-mmi-bigram-musan-dist/epoch-1-info",
    "2021-04-11 00:37:08,278 INFO [mmi_bigram_train.py:401] epoch 2, learning rate 0.001",
    "2021-04-11 01:07:37,757 INFO [common.py:201] write training info to exp-lstm-adam-mmi-bigram-musan-dist/epoch-2-info",
    "2021-04-11 01:07:37,758 INFO [mmi_bigram_train.py:401] epoch 3, learning rate 0.001",
]


def test_epochs_that_turn_are_progress_and_one_epoch_is_not():
    lines = lines_frame(SNOWFALL_EPOCHS)
    assert extract_metrics(lines)["epoch"].to_list() == [0, 1, 2, 3]  # `epoch-0-info` names no epoch
    assert health_proofs(lines, extract_metrics(lines), NO_FINDINGS)["line"].to_list() == [7]
    first = lines_frame(SNOWFALL_EPOCHS[:2])
    assert health_proofs(first, extract_metrics(first), NO_FINDINGS).is_empty()
