"""Training-metric lines (formats.md 6) -> step, loss, grad norm, step time, loss scale."""

from __future__ import annotations

import math

import pytest

from forensics.ingest.metrics import extract_metrics
from forensics.ingest.rank_logs import TextFile, read_text_files
from tests.conftest import lines_frame, write_files

NAN = float("nan")

# (line, step, loss, grad_norm, step_time_s, loss_scale); None = not on the line.
SAMPLES = [
    pytest.param(
        " iteration      122/  250000 | consumed samples:       124928 | elapsed time per iteration (ms): 86545.2 | learning rate: 9.150E-06 | global batch size:  1024 | lm loss: 2.504220E+00 | loss scale: 1.0 | grad norm: 0.231 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        122,
        2.50422,
        0.231,
        86.5452,
        1.0,
        id="megatron",
    ),
    pytest.param(
        " [2024-04-06 02:56:58] iteration       15/     100 | consumed samples:         1920 | elapsed time per iteration (ms): 5926.4 | throughput per GPU (TFLOP/s/GPU): 220.4 | learning rate: 3.000000E-06 | global batch size:   128 | lm loss: 1.957101E+00 | load_balancing_loss: 1.069903E+00 | loss scale: 1.0 | grad norm: 2.853 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        15,
        1.957101,
        2.853,
        5.9264,
        1.0,
        id="megatron-timestamped-moe",
    ),
    pytest.param(
        " iteration     5426/  250000 | consumed samples:        43408 | consumed tokens:     88899584 | elapsed time per iteration (ms): 4247.9 | learning rate: 2.999E-04 | global batch size:     8 | loss scale: 1.0 | grad norm: nan | actual seqlen:  2048 | number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 1.883 | TFLOPs: 78.36 |",
        5426,
        None,
        NAN,
        4.2479,
        1.0,
        id="megatron-deepspeed-nan-grad-norm",
    ),
    pytest.param(
        "[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%",
        22,
        6.225,
        None,
        None,
        None,
        id="torchtitan",
    ),
    pytest.param(
        "[titan] 2026-02-24 19:46:17,508 - root - INFO - step:  4  loss:  7.62585  grad_norm: 26.6250  memory: 66.91GiB(37.51%)  tps: 10,050  tflops: 314.71  mfu: 13.99%",
        4,
        7.62585,
        26.625,
        None,
        None,
        id="torchtitan-grad-norm",
    ),
    pytest.param(
        "[2023-11-07 01:55:23,711] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=4, lr=[4.99804827338393e-05, 4.99804827338393e-05], mom=[(0.9, 0.95), (0.9, 0.95)]",
        10,
        None,
        None,
        None,
        None,
        id="deepspeed-step",
    ),
    pytest.param(
        "Training epoch 0, iteration 120/149 | lr: 3e-05 | consumed_samples: 121 | global_batch_size: 1 | global_step: 120 | reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 4.106",
        120,
        1.233,
        None,
        0.03146,
        None,
        id="nemo2",
    ),
    pytest.param(
        "Training epoch 0, iteration 0/9 | lr: 0.0006 | consumed_samples: 32 | global_batch_size: 32 | global_step: 0 | reduced_train_loss: 11.02",
        0,
        11.02,
        None,
        None,
        None,
        id="nemo2-step-zero",
    ),
    pytest.param(
        "Epoch 0:   1%|          | 795/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1, v_num=, reduced_train_loss=3.090, global_step=794.0, consumed_samples=1.63e+6]",
        794,
        3.09,
        None,
        41.36,
        None,
        id="lightning-bar",
    ),
    pytest.param(
        "Epoch 0:   6%|██                               | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6, v_num=95nc, reduced_train_loss=2.590, global_step=3.2e+4, consumed_samples=2.56e+7]",
        32000,
        2.59,
        None,
        1 / 1.37,
        None,
        id="lightning-bar-scientific-step",
    ),
    pytest.param("{'loss': 2.0491, 'learning_rate': 0.0001961913563176343, 'epoch': 0.28}", None, 2.0491, None, None, None, id="hf"),
    pytest.param(
        "{'loss': 1.3736, 'grad_norm': 3.4177560806274414, 'learning_rate': 0.0001, 'epoch': 1.0}",
        None,
        1.3736,
        3.4177560806274414,
        None,
        None,
        id="hf-grad-norm",
    ),
    pytest.param(
        "{'loss': '2.205', 'grad_norm': '2.641', 'learning_rate': '0.0001333', 'mean_token_accuracy': '0.6839', 'epoch': '2'}",
        None,
        2.205,
        2.641,
        None,
        None,
        id="hf-string-values",
    ),
    pytest.param(
        "{'eval_loss': 0.3461727797985077, 'eval_runtime': 9.144, 'eval_samples_per_second': 10.936, 'eval_steps_per_second': 1.422, 'epoch': 1.0, 'step': 10000}",
        10000,
        None,
        None,
        None,
        None,
        id="hf-eval-with-step",
    ),
    # Durations in their own units: milliseconds, sec/step, s/it (karpathy/nanoGPT#110, rwth-i6/returnn#1485).
    pytest.param("iter 1639: loss 3.9185, time 562.66ms", 1639, 3.9185, None, 0.56266, None, id="nanogpt-ms"),
    # detectron2's EventWriter (facebookresearch/detectron2#195): `iter:` and `total_loss:`; its `time:` is seconds per iteration.
    pytest.param(
        "[11/01 11:24:18 d2.utils.events]: eta: 8:07:40  iter: 759  total_loss: 1.070  loss_cls: 0.747  loss_box_reg: 0.322  "
        "time: 0.3323  data_time: 0.0369  lr: 0.007592  max_mem: 3961M",
        759,
        1.070,
        None,
        0.3323,
        None,
        id="detectron2-events",
    ),  # fmt: skip
    pytest.param(
        "ep 29 train, step 1, ce 5.476, ctc_17 6.839, fer 0.836, mem_usage:cuda:0 6.5GB, 2.238 sec/step",
        1,
        None,
        None,
        2.238,
        None,
        id="returnn-sec-per-step",
    ),
    pytest.param("Epoch 10/10: 240it [05:55,  1.47s/it, loss=5.46]", None, 5.46, None, 1.47, None, id="tqdm-s-per-it"),
    # mmcv and mmengine: the batch within the epoch, or the iteration (open-mmlab/mmdetection#1742).
    pytest.param(
        "2020-07-31 22:40:50,985 - mmdet - INFO - Epoch [1][50/1749]	eta: 2:36:29, time: 1.807, data_time: 0.047, memory: 5280",
        50,
        None,
        None,
        1.807,
        None,
        id="mmcv-epoch-batch",
    ),
    pytest.param(
        "2019-12-03 13:37:43,641 - INFO - Epoch [6][3250/3681]	lr: 0.02000, eta: 3:49:37, time: 0.347, data_time: 0.005, memory: 6147, loss_rpn_cls: 117119.4643, loss_rpn_bbox: 86211.9636, loss_cls: 18325.3354, acc: 83.0372, loss_bbox: 3535.8495, loss: 225192.6129",
        3250,
        225192.6129,
        None,
        0.347,
        None,
        id="mmcv-epoch-batch-loss",
    ),
    # open-mmlab/mmengine#155 and NJU-LHRS/official-CMID#5: iteration-based runners.
    pytest.param(
        "04/22 11:14:42 - mmengine - INFO - Iter(train) [10/270]  lr: 1.000e-02  eta: 0:00:27  time: 0.004  data_time: 0.000  memory: 0  loss: 5.3294",
        10,
        5.3294,
        None,
        0.004,
        None,
        id="mmengine-iter",
    ),
    pytest.param(
        "2023-06-21 05:37:06,540 - mmseg - INFO - Iter [200/21600]\tlr: 9.998e-03, eta: 1:05:45, time: 0.141, data_time: 0.008, memory: 22159, decode.loss_ce: 1.2669, decode.acc_seg: 11.8965, aux.loss_ce: 0.4904, aux.acc_seg: 16.9658, loss: 1.7573",
        200,
        1.7573,
        None,
        0.141,
        None,
        id="mmcv-iter",
    ),
    pytest.param(" 84%|████████▍ | 101/120 [01:07<03:28, 10.97s/it]", 101, None, None, 10.97, None, id="hf-trainer-bar"),
    pytest.param(  # raster-vision#2018: the bar's label carries a note
        "Training (GPU=3): 100%|███████████████████████████████████████████████████████████████| 250/250 [00:37<00:00,  6.63it/s]",
        250,
        None,
        None,
        1 / 6.63,
        None,
        id="labelled-training-bar",
    ),
    pytest.param(
        "Epoch 0:   0%|          | 2/351750 [00:04<204:24:55,  2.09s/it, loss=11, v_num=9-02, reduced_t",
        2,
        11.0,
        None,
        2.09,
        None,
        id="lightning-bar",
    ),
    pytest.param(
        "tick 7     kimg 140.0    time 9h 40m 06s   sec/tick 5004.8  sec/kimg 250.24  maintenance 8.4    cpumem 1.37   gpumem 11.09  reserved 20.27  augment 0.984",
        7,
        None,
        None,
        None,
        None,
        id="stylegan-tick",
    ),
    pytest.param(  # Alpha-VLLM/LLaMA2-Accessory#48: the DeiT/MAE MetricLogger
        "[03:23:49.951215] Epoch: [0]  [1480/1504]  lr: 0.000026  closs: 1.0800 (1.1317)  grad_norm: 0.4995 (1.1826)  time: 4.5833  data: 0.0002  max mem: 51710",
        1480,
        None,
        0.4995,
        4.5833,
        None,
        id="metric-logger",
    ),
    pytest.param(  # open-mmlab/mmsegmentation#132: mmcv's IterBasedRunner, step and data time in seconds
        "2020-09-14 20:52:47,336 - mmseg - INFO - Iter [94/8000] lr: 9.896e-03, eta: 2:26:05, time: 20.735, data_time: 0.059, memory: 3642, decode.loss_seg: 1.4042, decode.acc_seg: 5     2.4499, aux.loss_seg: 0.6718, aux.acc_seg: 46.9589, loss: 2.0760",
        94,
        2.076,
        None,
        20.735,
        None,
        id="mmcv-iter-stall",
    ),
    pytest.param(  # NVIDIA/DeepLearningExamples#694: DLLogger, one value per line after (epoch, iteration)
        "DLL 2020-10-30 14:53:21.096695 - (67, 11) train_loss : nan ",
        11,
        float("nan"),
        None,
        None,
        None,
        id="dllogger-nan",
    ),
    pytest.param(  # kubeflow/kubeflow#68: MXNet's Speedometer
        "INFO:root:Epoch[1] Batch [80]   Speed: 2001.21 samples/sec      accuracy=0.377051",
        80,
        None,
        None,
        None,
        None,
        id="mxnet-speedometer",
    ),
    pytest.param(  # apache/mxnet#3932: the R package's Speedometer, with no epoch in front
        "Batch [300] Speed: 26175.9795924537 samples/sec Train-accuracy=0.95375",
        300,
        None,
        None,
        None,
        None,
        id="mxnet-r-speedometer",
    ),
    pytest.param(  # IML-ViT#35: the MAE/DeiT log.txt, one JSON line per epoch, NaN as JSON writes it
        '{"train_lr": 9.999787476642203e-05, "train_predict_loss": NaN, "train_edge_loss": NaN, "test_average_f1": 0.0, "epoch": 4}',
        4,
        float("nan"),
        None,
        None,
        None,
        id="json-log-txt-nan",
    ),
    pytest.param(
        '{"train_lr": 1.2480487331573042e-05, "train_predict_loss": 0.7279542872231782, "train_edge_loss": 0.0554991626542601, "test_average_f1": 0.13728936245250195, "epoch": 0}',
        0,
        0.7279542872231782,
        None,
        None,
        None,
        id="json-log-txt",
    ),
    pytest.param(  # fairseq#233: --log-format json, the train line of one epoch
        '{"epoch": 27, "loss": "3.092", "nll_loss": "1.322", "ppl": "2.50", "wps": 1658188, "ups": "2.7", "wpb": 617153, "bsz": 16625, "num_updates": 58049, "lr": 0.0001837514032631448, "gnorm": "0.188", "clip": "100%", "oom": 0.026288135885200434, "loss_scale": "4.000", "wall": 22395}',
        27,
        3.092,
        None,
        None,
        None,
        id="fairseq-json",
    ),
    pytest.param(  # fairseq#1529: the simple progress line of an epoch whose fp16 loss scale ran down to nothing
        "| epoch 028 | loss 3.976 | nll_loss 2.204 | ppl 4.61 | wps 279460 | ups 3 | wpb 110529.673 | bsz 3780.211 | num_updates 9165 | lr 0.000330319 | gnorm 0.635 | clip 0.000 | oom 0.000 | loss_scale 0.000 | wall 4043 | train_wall 3606",
        None,
        3.976,
        None,
        None,
        0.0,
        id="fairseq-simple-loss-scale",
    ),
    pytest.param(  # mindspore-lab/mindaudio#92: MindSpore's LossMonitor
        "epoch: 1 step: 36, loss is 438.53326416015625",
        36,
        438.53326416015625,
        None,
        None,
        None,
        id="mindspore-loss-monitor",
    ),
    pytest.param(  # modelscope/ms-swift#2436: its logging.jsonl line when the gradient norm turned NaN
        '{"loss": 2.23302879, "acc": 0.26443233, "grad_norm": NaN, "learning_rate": 1.617e-05, "memory(GiB)": 19.54, "train_speed(iter/s)": 0.408118, "epoch": 0.7497623, "global_step/max_steps": "8280/11043", "percentage": "74.98%", "elapsed_time": "5h 38m 5s", "remaining_time": "1h 52m 49s"}',
        8280,
        2.23302879,
        float("nan"),
        None,
        None,
        id="ms-swift-jsonl",
    ),
    pytest.param(  # a CTC speech model's epoch summary, padded to align its colons (speech-recognition-primer#2)
        "LOSS     :  nan",
        None,
        float("nan"),
        None,
        None,
        None,
        id="padded-colon-loss",
    ),
    pytest.param(  # AlexeyAB/darknet#2789 (quoted as posted): darknet's iteration line, running average second
        ">  28: -nan, -nan avg loss, 0.000000 rate, 0.797576 seconds, 1792 images",
        28,
        float("nan"),
        None,
        None,
        None,
        id="darknet-iteration",
    ),
    pytest.param(  # UMDATrack#5 (PyTracking's ltr trainer): the total among named parts
        "[train_mix: 3, 200 / 234] FPS: 17.8 (57.7)  ,  DataTime: 0.880 (0.023)  ,  ForwardTime: 2.686  ,  TotalTime: 3.590  ,  Loss/total: 0.77811  ,  Loss/giou: 0.17372  ,  Loss/l1: 0.01593",
        None,
        0.77811,
        None,
        None,
        None,
        id="ltr-loss-total",
    ),
    pytest.param(  # pytorch/pytorch#107294: nanoGPT on MPS printing its loss tensor
        "loss:  tensor(nan, device='mps:0', grad_fn=<NllLossBackward0>)",
        None,
        float("nan"),
        None,
        None,
        None,
        id="printed-loss-tensor",
    ),
    pytest.param(  # dbolya/yolact#53, quoted in a reply: epoch, iteration, the loss parts, then their total T
        "> [  0]     240 || B: 4.553 | C: 6.594 | M: 5.163 | S: 1.210 | T: 17.519 || ETA: 6 days, 20:00:21 || timer: 0.648",
        240,
        17.519,
        None,
        None,
        None,
        id="yolact-total",
    ),
    pytest.param(  # eriklindernoren/PyTorch-YOLOv3#13: the print many YOLOv3 forks keep, every part named; `total` is the loss
        "[Epoch 0/30, Batch 323/1313] [Losses: x nan, y nan, w nan, h nan, conf 0.755184, cls nan, total nan]",
        None,
        float("nan"),
        None,
        None,
        None,
        id="yolov3-losses-total",
    ),
    pytest.param(  # TensorFlowTTS#258: one named part per line; a part is read only when it is not finite
        "2020-09-10 11:52:14,449 (base_trainer:831) INFO: (Step: 95400) train_mel_loss_before = nan.",
        95400,
        float("nan"),
        None,
        None,
        None,
        id="tensorflowtts-nan-part",
    ),
    pytest.param(
        "2020-09-10 11:52:14,448 (base_trainer:831) INFO: (Step: 95400) train_f0_loss = 0.0659.",
        95400,
        None,
        None,
        None,
        None,
        id="tensorflowtts-finite-part",
    ),
    pytest.param(  # tensorflow/models' official ResNet, as quoted in a fine-tuning script: the loss is named cross_entropy
        "INFO:tensorflow:cross_entropy = 0.128834, learning_rate = 1.09375e-06, train_accuracy = 0.847687 (20.201 sec)",
        None,
        0.128834,
        None,
        None,
        None,
        id="tensorflow-cross-entropy",
    ),
    pytest.param(  # faceswap#188: a run that logs only its two named losses
        "saved model weights loss_A: 0.06181, loss_B: 0.05596",
        None,
        0.06181,
        None,
        None,
        None,
        id="named-loss-parts",
    ),
    pytest.param(  # RVC/VITS trainers' GAN losses: the first part stands for the line
        "INFO:xx:loss_disc=3.598, loss_gen=3.174, loss_fm=8.765,loss_mel=19.367, loss_kl=1.520",
        None,
        3.598,
        None,
        None,
        None,
        id="gan-loss-parts",
    ),
    pytest.param(  # open-mmlab/mmdetection#1742: the parts come first, the total `loss:` is the one read
        "2019-12-03 13:36:58,567 - INFO - Epoch [6][3150/3681]\tlr: 0.02000, eta: 3:50:55, time: 0.924, data_time: 0.005, memory: 6147, loss_rpn_cls: 0.0431, loss_rpn_bbox: 0.0594, loss_cls: 0.2494, acc: 90.6348, loss_bbox: 0.2668, loss: 0.6186",
        3150,
        0.6186,
        None,
        0.924,
        None,
        id="mmdet-total-over-parts",
    ),
    pytest.param(  # Horovod#675: an AverageMeter line, each value followed by its running mean
        "[GPU rank 1] Epoch: [1][30786/34406]    Time 0.783 (2.771)      Data 0.006 (1.204)      Loss 58.0583 (55.2676)",
        30786,
        58.0583,
        None,
        0.783,
        None,
        id="average-meter",
    ),
    pytest.param(  # Horovod#372: TensorFlow's LoggingTensorHook, spaces around `=`
        "INFO:tensorflow:loss = 0.0805988, step = 991 (0.387 sec)",
        991,
        0.0805988,
        None,
        None,
        None,
        id="tensorflow-estimator",
    ),
    pytest.param(  # tensorflow#42834: Python's zero-padded format prints nan as `0000nan`
        "Step      80 (23.64%): loss = 0000nan EER=0.00000",
        80,
        float("nan"),
        None,
        None,
        None,
        id="zero-padded-nan",
    ),
    pytest.param(  # danijar/dreamer#58: per-network norms and losses, space-separated; the world model's come first
        "[7000] expl_amount 0.3 / model_grad_norm nan / value_grad_norm 81.3 / actor_grad_norm 0.1 / prior_ent 76.6 / post_ent 68.2 / image_loss 8496855334057326588896827408384.0 / reward_loss 1067895404697208119929243435008.0 / div inf / model_loss inf / value_loss 5.0 / actor_loss -25.3 / action_ent -63.6 / fps 9.3",
        None,
        float("inf"),
        float("nan"),
        None,
        None,
        id="dreamer-per-network",
    ),
    pytest.param(  # fixtures/incidents: the step's own loss, not the running average printed after it
        "[default0]:2026-11-24 08:18:26,427 INFO [rank0] step 1 | loss 2.3321 | avg_loss 2.3109 | data_time 0.032s | step_time 0.111s",
        1,
        2.3321,
        None,
        0.111,
        None,
        id="loss-before-running-average",
    ),
    pytest.param(  # wy1iu/sphereface#103: Caffe's solver line
        "I0718 05:27:41.934793 23375 solver.cpp:218] Iteration 23500 (1.00034 iter/s, 99.9662s/100 iters), loss = 38.7695",
        23500,
        38.7695,
        None,
        None,
        None,
        id="caffe-solver",
    ),
    pytest.param(  # astooke/rlpyt-based dreamer-pytorch#82: the tabular logger's key/value rows
        "2020-12-08 21:40:50.120008  | loss/Average                    nan",
        None,
        float("nan"),
        None,
        None,
        None,
        id="rllab-tabular",
    ),
]


def same(got, want) -> bool:
    if want is None:
        return got is None
    if isinstance(want, float) and math.isnan(want):
        return got is not None and math.isnan(got)
    return got == pytest.approx(want)


@pytest.mark.parametrize(("text", "step", "loss", "grad_norm", "step_time_s", "loss_scale"), SAMPLES)
def test_sample_line(text, step, loss, grad_norm, step_time_s, loss_scale):
    metrics = extract_metrics(lines_frame([text]))
    assert metrics.height == 1
    row = metrics.row(0, named=True)
    assert row["step"] == step
    for column, want in [("loss", loss), ("grad_norm", grad_norm), ("step_time_s", step_time_s), ("loss_scale", loss_scale)]:
        assert same(row[column], want), (column, row[column], want)


@pytest.mark.parametrize(
    "text",
    [
        "[rank0]:[titan] 2025-03-12 11:10:21,603 - root - WARNING - Dataset c4_test is being re-looped",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.2 GiB is free. Of the allocated memory 76.5 GiB is allocated by PyTorch, and 1.1 GiB is reserved by PyTorch but unallocated.",
        "[rank0]:[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout",
        # A bar that counts something other than training steps is not a step.
        "Loading checkpoint shards: 100%|██████████| 61/61 [05:45<00:00,  5.66s/it]",
        "Validating (GPU=0): 100%|███████████████████████████████████████████████████████████████| 38/38 [00:03<00:00, 12.02it/s]",
        # A clipping setting is not a measured norm.
        "Namespace(clip_grad_norm=1.0, max_grad_norm=inf, seed=42)",
        "2020-12-08 21:40:50.120137  | loss/Median                     nan",
    ],
)
def test_lines_without_a_known_measure_give_no_row(text):
    """A memory figure without its unit (mmdet's `memory: 5280`) is not guessed; an OOM message is not a metric."""
    assert extract_metrics(lines_frame([text])).is_empty()


def test_file_line_and_rank_are_kept_for_citation():
    metrics = extract_metrics(lines_frame(["noise", "step 12 | loss 3.5"], file="rank_7.log", rank=7))
    assert metrics.select("file", "line", "rank", "step", "loss").row(0) == ("rank_7.log", 2, 7, 12, 3.5)


def test_torchtitan_colour_line_parses_after_ingest(tmp_path):
    # Raw torchtitan output carries ANSI colours around every field (formats.md 6.5).
    raw = (
        "[rank0]:[titan] 2025-06-16 22:30:50,322 - root - INFO - \x1b[31mstep: 200  \x1b[32mloss:  6.1384  "
        "\x1b[33mmemory: 49.66GiB(52.28%)  \x1b[34mtps: 5,856  \x1b[36mtflops: 339.16  \x1b[35mmfu: 34.29%\x1b[39m\n"
    )
    write_files(tmp_path, {"rank_0.log": raw})
    lines, _, _ = read_text_files(tmp_path, [TextFile("rank_0.log", 0)])
    assert "\x1b" not in lines["text"][0]
    row = extract_metrics(lines).row(0, named=True)
    assert (row["step"], row["loss"]) == (200, pytest.approx(6.1384))


def test_thousands_separator_in_a_value():
    row = extract_metrics(lines_frame([" iteration 3/ 10 | lm loss: 1.5 | grad norm: 12,345.5 |"])).row(0, named=True)
    assert row["grad_norm"] == 12345.5


def test_empty_input():
    assert extract_metrics(lines_frame([])).is_empty()


@pytest.mark.parametrize(
    ("text", "scale"),
    [
        (
            "[2023-11-07 01:55:08,040] [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 8192.0, reducing to 4096.0",
            4096.0,
        ),
        ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 2.0", 2.0),
        ("NOTE: overflow detected, setting loss scale to: 0.000244140625", 0.000244140625),
    ],
)
def test_loss_scale_changes_are_metric_rows(text, scale):
    """fp16 overflow notes (DeepSpeed, apex, fairseq) carry the new loss scale and nothing else."""
    row = extract_metrics(lines_frame([text])).row(0, named=True)
    assert row["loss_scale"] == scale and row["step"] is None and row["loss"] is None


# yangqy1110/MGDM#3 (real lines): OpenAI's logger table, one key per row, as guided-diffusion and its
# descendants print it, and the fp16 trainer's note with the scale's base-2 logarithm.
OPENAI_TABLE = {
    "| loss          | 0.423    |": ("loss", 0.423),
    "| step          | 1.09e+04 |": ("step", 10900),
    "| lg_loss_scale | 17.9     |": ("loss_scale", 2.0**17.9),
    "Found NaN, decreased lg_loss_scale to 16.929000000013357": ("loss_scale", 2.0**16.929000000013357),
}


@pytest.mark.parametrize("text", list(OPENAI_TABLE))
def test_openai_logger_rows_and_base_2_loss_scales(text):
    column, value = OPENAI_TABLE[text]
    assert extract_metrics(lines_frame([text])).row(0, named=True)[column] == pytest.approx(value)


def test_a_base_2_scale_too_large_for_a_float_is_no_scale():
    # A mangled or hostile table value must not become an infinite scale that every real one sits below.
    rows = extract_metrics(lines_frame(["| lg_loss_scale | 1e+05    |", "| step          | 1.09e+04 |"]))
    assert rows["loss_scale"].is_null().all()


def test_other_keys_of_the_table_are_no_loss():
    assert extract_metrics(lines_frame(["| mse_q0        | 0.342    |", "| vb            | 0.193    |"])).is_empty()


# (line, lr, tokens/s, samples/s, TFLOP/s, MFU %, allocated GiB, reserved GiB); None = not on the line.
THROUGHPUT = [
    pytest.param(
        "[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%",
        None, 193831.0, None, 18.36, 1.86, 1.41, None,
        id="torchtitan",
    ),
    pytest.param(
        " [2024-04-06 02:56:58] iteration       15/     100 | consumed samples:         1920 | elapsed time per iteration (ms): 5926.4 | throughput per GPU (TFLOP/s/GPU): 220.4 | learning rate: 3.000000E-06 | global batch size:   128 | lm loss: 1.957101E+00 | load_balancing_loss: 1.069903E+00 | loss scale: 1.0 | grad norm: 2.853 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        3e-06, None, None, 220.4, None, None, None,
        id="megatron-log-throughput",
    ),
    pytest.param(
        " iteration     5426/  250000 | consumed samples:        43408 | consumed tokens:     88899584 | elapsed time per iteration (ms): 4247.9 | learning rate: 2.999E-04 | global batch size:     8 | loss scale: 1.0 | grad norm: nan | actual seqlen:  2048 | number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 1.883 | TFLOPs: 78.36 |",
        2.999e-04, None, 1.883, 78.36, None, None, None,
        id="megatron-deepspeed",
    ),
    pytest.param(
        "[2023-11-07 01:55:23,711] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=4, lr=[4.99804827338393e-05, 4.99804827338393e-05], mom=[(0.9, 0.95), (0.9, 0.95)]",
        4.99804827338393e-05, None, None, None, None, None, None,
        id="deepspeed-lr-list",
    ),
    pytest.param(
        "[2023-11-07 01:55:23,714] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=25.025771473496132, CurrSamplesPerSec=25.704280480541442, MemAllocated=4.32GB, MaxMemAllocated=38.49GB",
        None, None, 25.704280480541442, None, None, 4.32, None,
        id="deepspeed-timer",
    ),
    pytest.param(
        "Training epoch 0, iteration 120/149 | lr: 3e-05 | consumed_samples: 121 | global_batch_size: 1 | global_step: 120 | reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 4.106",
        3e-05, None, None, None, None, None, None,
        id="nemo2",
    ),
    pytest.param(
        "{'loss': 1.3736, 'grad_norm': 3.4177560806274414, 'learning_rate': 0.0001, 'epoch': 1.0}",
        0.0001, None, None, None, None, None, None,
        id="hf-trainer",
    ),
    pytest.param(
        "{'train_runtime': 326.3445, 'train_samples_per_second': 4.903, 'train_steps_per_second': 1.226, 'train_loss': 0.3935928952693939, 'epoch': 10.0}",
        None, None, 4.903, None, None, None, None,
        id="hf-trainer-summary",
    ),
    pytest.param(
        "[Rank 0] (after 10 iterations) memory (MB) | allocated: 2048.0 | max allocated: 4096.0 | reserved: 5120.0 | max reserved: 5120.0",
        None, None, None, None, None, 2.0, 5.0,
        id="megatron-memory-report",
    ),
    pytest.param(
        "step 40 | loss 2.1 | lr=0.001 | 12,480 tokens/s | mfu=0.41 | mem_allocated=10240MiB",
        0.001, 12480.0, None, None, 41.0, 10.0, None,
        id="plain-print-units",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("text", "lr", "tokens", "samples", "tflops", "mfu", "allocated", "reserved"), THROUGHPUT)
def test_learning_rate_throughput_and_memory(text, lr, tokens, samples, tflops, mfu, allocated, reserved):
    """Units normalized: MB and GB as the frameworks print them (bytes / 1024**k), MFU fractions as percent."""
    row = extract_metrics(lines_frame([text])).row(0, named=True)
    want = {
        "lr": lr, "tokens_per_s": tokens, "samples_per_s": samples, "tflops": tflops, "mfu_pct": mfu,
        "memory_allocated_gib": allocated, "memory_reserved_gib": reserved,
    }  # fmt: skip
    for column, value in want.items():
        assert same(row[column], value), (column, row[column], value)


def test_throughput_alone_is_not_training_progress():
    """A summary or a memory report is a metric row, but not proof that the loop is turning."""
    from forensics.passes.health import training_progress

    metrics = extract_metrics(lines_frame(["{'train_runtime': 326.3445, 'train_samples_per_second': 4.903}", "step 3 | loss 2.0"]))
    assert metrics.height == 2
    assert training_progress(metrics)["line"].to_list() == [2]


@pytest.mark.parametrize(
    "text, epoch",
    [
        # ultralytics/yolov5#2552: epoch, GPU memory, box/obj/cls/total losses, targets, image size, P, R, mAPs.
        (
            "     38/89     5.62G   0.02079  0.008967  0.000934   0.03069         6       640    0.9867    0.9858    0.9925    0.8195   0.01367  0.004131 0.0004072",
            38,
        ),
        # A newer ultralytics (YOLOv8-style) row with its per-epoch bar on the same line.
        ("      1/100      3.09G      3.413      4.199      3.863         13        640: 100% ━━━━━━━━━━━━ 588/588 3.6it/s 2:45", 1),
    ],
)
def test_an_ultralytics_epoch_row_is_a_step(text, epoch):
    assert extract_metrics(lines_frame([text]))["step"].to_list() == [epoch]


def test_a_timing_breakdown_s_loss_phase_is_a_duration_and_its_batch_a_step():
    # ecmwf/WeatherGenerator#668 (real lines): per-phase times of each batch, one line per rank.
    rows = extract_metrics(
        lines_frame(
            [
                "0: [Epoch 0, Batch 6] Data: 2.6ms | BS_TO_DEVICE: 19.9ms | Forward: 237.0ms | Loss: 71.2ms | Backward: 532.1ms | Clipping: 3.2ms | Optimizer: 432.7ms | Scheduler: 0.0ms | Rest: 3.8ms | Total: 1302.5ms | ",
                "2: [Epoch 0, Batch 7] Data: 2.7ms | BS_TO_DEVICE: 18.0ms | Forward: 245.5ms | Loss: 71.7ms | Backward: 529.8ms | Clipping: 2.1ms | Optimizer: 467.5ms | Scheduler: 0.0ms | Rest: 5.5ms | Total: 1342.8ms | ",
                "loss: 2.31",
            ]
        )
    )
    assert rows["step"].to_list() == [6, 7, None]
    assert rows["loss"].to_list() == [None, None, 2.31]


def test_a_capitalised_iter_counter_is_a_step():
    # harvardnlp/data2text#9 (real lines): the Lua seq2seq trainer's progress, the counter restarting each epoch.
    rows = extract_metrics(
        lines_frame(
            [
                "Epoch 1 ; Iter 50/213 ; LR 1.0000 ; Target tokens/s 1265 ; PPL 8226.52 ;",
                "Epoch 2 ; Iter 200/213 ; LR 1.0000 ; Target tokens/s 1322 ; PPL 118.44 ;",
            ]
        )
    )
    assert rows["step"].to_list() == [50, 200]
