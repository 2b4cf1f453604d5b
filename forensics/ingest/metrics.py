"""Training-metric lines -> the METRICS frame (step, loss, lr, grad norm, times, throughput, memory).

Formats from reference/formats.md 6: Megatron `iteration N/ M | ... lm loss: ... |`,
torchtitan `step: N  loss: X`, DeepSpeed `step=N, skipped=`, NeMo 2 `iteration N/M |
reduced_train_loss: ...`, Lightning `global_step=...`, HF Trainer dicts `{'loss': ...}`,
plain `step N ... loss X` prints, and fp16 loss-scale notes (`reducing loss scale to 2.0`).
Units are normalized: durations to seconds, memory to GiB, MFU to percent, `7,282` and
`1.63e+6` to numbers. A field whose unit is not stated or not known is left empty, never
guessed. A cheap literal filter selects candidate lines, then one short `str.extract` per
field runs on those only (fast: performance.md).
"""

from __future__ import annotations

import polars as pl

from forensics.schema import METRICS, conform, empty

# A value, nan and inf included; Python's zero-padded formats print nan as `0000nan` (`%09.5f`).
NUMBER = r"([-+]?(?:0*(?i:nan|inf)\b|\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?))"

# A training loop's tqdm bar: HF Trainer's bare ` 84%|████▍ | 101/120 [01:07<03:28, 10.97s/it]`,
# Lightning's `Epoch 3:`, sd-scripts' `steps:`, a label with a note (`Training (GPU=3):`). Bars
# with any other label (`Loading checkpoint shards:`, `Map:`, `caching latents`) count
# something other than training steps.
TRAINING_BAR = (
    r"^\s*(?:\[\w+\]:\s*|\d+:\s*)*(?:(?:Epoch \d+|steps|Training|train)(?: \([^)]{1,40}\))?\s*:\s*)?\d{1,3}%\|[^|]*\|\s*(\d+)/\d+\s*"
    r"\[[\d:]+<[\d:?]+,\s*[\d.?]+\s*(?:s/it|it/s)"
)
# Ultralytics YOLOv5/v8 epoch rows: `     38/89     5.62G   0.02079  0.008967 ...` (epoch/epochs, GPU
# memory, then the losses, whose columns differ between versions and are not read).
YOLO_EPOCH_ROW = r"^\s*(\d+)/\d+\s+\d+(?:\.\d+)?G\s+\d*\.\d+\s+\d*\.\d+"
STEP = [
    r"\biteration:?\s+(\d+)\s*/",  # Megatron, NeMo 2 `iteration 10/`, nanotron `iteration: 327284 / 378950`
    r"\bglobal_step[=:]\s*(\d+(?:\.\d+)?(?:e\+\d+)?)",  # Lightning / NeMo bar (may be 3.2e+4)
    r"(?i)\bstep(?: ?[=:]\s*|\s+)(\d+)\b",  # torchtitan `step: 22`, DeepSpeed `step=10`, `Step 120, Loss:`, TF `step = 991`
    r"\b[Ii]ter(?::\s*|\s+)(\d+)\b",  # nanoGPT `iter 1639: loss 3.9185`, detectron2 `iter: 759  total_loss: 1.070`, seq2seq-attn `Epoch 1 ; Iter 50/213 ;`
    r"'step': '?(\d+)",  # HF dict with a step callback
    r'"global_step/max_steps": "(\d+)/\d+"',  # ms-swift's JSON lines
    r'^\{"train_.*"epoch": (\d+)\}\s*$',  # MAE/DeiT/DINO log.txt, one JSON line per epoch
    r'^\{"epoch": (\d+), "loss": ',  # fairseq's json train line, one per epoch
    r"\bEpoch \d+, [Bb]atch (\d+)\b",  # icefall/k2 `Epoch 1, batch 50, loss[...]`, a timing breakdown `[Epoch 0, Batch 6] Data: 2.6ms |` (the counter restarts each epoch)
    r"\bEpoch(?:\(train\))?:? *\[\d+\]\s*\[\s*(\d+)/\d+\]",  # mmcv `Epoch [6][3150/3681]`, mmengine `Epoch(train) [1][ 50/625]`, the DeiT/MAE/DETR MetricLogger `Epoch: [0]  [1480/1504]` (restarts each epoch)
    r"\bIter(?:\(train\))? ?\[\s*(\d+)/\d+\]",
    r"(?:\bEpoch\[\d+\] )?\bBatch \[(\d+)\]\s+Speed: ",  # MXNet's Speedometer `Epoch[0] Batch [20]   Speed: 2015.42 samples/sec` (R: no epoch; restarts each epoch)  # mmcv/mmengine iteration-based `Iter(train) [ 50/90000]`
    r"solver\.cpp:\d+\] Iteration (\d+)\b",
    r"^(?:>\s*)?\s*(\d+): [-+]?[\w.]+, [-+]?[\w.]+ avg\b",  # darknet `28: -nan, -nan avg loss, 0.000000 rate, ...`  # Caffe `solver.cpp:218] Iteration 23500 (1.00034 iter/s, ...), loss = 38.7695`
    r"^\|\s*step\s*\|\s*(\d+(?:\.\d+)?(?:e\+\d+)?)\s*\|",  # OpenAI's logger table (baselines, guided-diffusion) `| step          | 1.53e+05  |`
    r"^(?:>\s*)?\[\s*\d+\]\s+(\d+) \|\| B: ",  # YOLACT `[  0]    7860 || B: 4.553 | C: 6.594 | ... | T: 17.519 || ETA: ...` (epoch, iteration)
    r"^tick\s+(\d+)\s+kimg\b",  # NVlabs StyleGAN2-ADA/3 `tick 7     kimg 140.0    time 9h 40m 06s`
    r"^DLL \S+ \S+ - \(\d+, (\d+)\) ",  # NVIDIA DLLogger `DLL 2020-10-30 14:53:19.587047 - (67, 9) train_loss : -4.36` (epoch, iteration; restarts each epoch)
    YOLO_EPOCH_ROW,
    TRAINING_BAR,
]
# The epoch a line names: `epoch 2, learning rate 0.001`, `Train Epoch: 3 [18%]`, `====> Epoch: 1 [...]`,
# Keras `Epoch 1/10`, mmcv `Epoch [6][3150/3681]`; never `epochs`, `num_epochs`, `best_epoch` or `epoch-1-info`.
EPOCH = r"(?i)(?:^|[^\w-])epoch\s*[:=]?\s*\[?\s*(\d+)\b"
LOSS = [
    r"\blm loss:\s*" + NUMBER,
    r"\breduced_train_loss[=:]\s*" + NUMBER,
    r"'loss': '?" + NUMBER,
    r'"train_(?:\w+_)?loss": ' + NUMBER,  # MAE/DeiT/DINO log.txt `"train_loss": 0.72` (JSON's NaN too)
    r'[{,]\s*"loss": "?' + NUMBER,  # fairseq's --log-format json `{"epoch": 27, "loss": "3.092", ...}`; never "valid_loss"
    r"(?i)\bloss\s*[=:]\s*" + NUMBER,
    r"(?i)\bloss\s*[=:]?\s*tensor\(\s*"
    + NUMBER,  # a printed scalar tensor `loss:  tensor(nan, device='mps:0', grad_fn=<NllLossBackward0>)`  # `loss=2.3`, `loss: 2.3`, TensorFlow's `loss = 2.3`, a padded `LOSS     :  24.5`
    r"\b(?:avr|avg|train|running|mean|total|lm)_loss\s*[=:]\s*"
    + NUMBER,  # sd-scripts `avr_loss=nan`, nanotron `lm_loss: 2.36`; never val_/eval_loss
    r"\btrain/CrossEntropyLoss[=:]\s*" + NUMBER,  # OLMo's metric block under `[step=3/739328,epoch=0]`
    r"(?i)\bloss\]?\s+" + NUMBER + r"\b",  # `loss 2.31`, `[Loss] nan`
    r"\|\s+(?:\w+/)*[Ll]oss(?:/Average)?\s+(?:\|\s*)?"
    + NUMBER
    + r"\s*\|?\s*$",  # rllab/rlpyt tabular `2020-12-08 21:40:50.120008  | loss/Average   nan`, OpenAI's logger table `| loss          | nan       |`
    r"\bloss is " + NUMBER,
    r"^(?:>\s*)?\s*\d+: [-+]?[\w.]+, "
    + NUMBER
    + r" avg\b",  # darknet: the running average loss  # MindSpore's LossMonitor `epoch: 1 step: 35, loss is 514.43310546875`
    r"\| T: " + NUMBER + r" \|\|",  # YOLACT's total after its parts `B: 4.553 | C: 6.594 | M: 5.163 | S: 1.210 | T: 17.519 ||`
    r"\b[Ll]oss/(?:total|overall)\s*[=:]\s*" + NUMBER,  # PyTracking's ltr trainers `Loss/total: 0.81756  ,  Loss/giou: 0.18267`
    r"\bLosses: [^\]]*\btotal\s+" + NUMBER,  # PyTorch-YOLOv3 `[Losses: x nan, y nan, w nan, h nan, conf 0.755184, cls nan, total nan]`
    r"\bcross_entropy\s*[=:]\s*" + NUMBER,  # TensorFlow's official models `INFO:tensorflow:cross_entropy = 3.2162714, learning_rate = ...`
    r"\bloss_[A-Za-z]\w{0,15}\s*[=:]\s*"
    + NUMBER,  # a run logging only named parts: faceswap `loss_A: 0.06181, loss_B:`, a GAN's `loss_disc=3.598, loss_gen=` (the first)
    r"\btrain_\w{1,30}loss\w{0,20}\s*[=:]\s*([-+]?(?i:nan|inf))\b",  # a named part only when it is not finite: TensorFlowTTS `(Step: 95400) train_mel_loss_before = nan.` (its parts, one per line, are no one series)
    r"\bmodel_loss\s+" + NUMBER,  # Dreamer `image_loss 11650.7 / ... / model_loss inf`: after `loss 2.3` (never `avg_loss 2.3`)
]
GRAD_NORM = [
    r"\bgrad[ _]norm[=:]?\s*" + NUMBER,
    r"'grad_norm': '?" + NUMBER,
    r'"grad_norm": "?' + NUMBER,  # ms-swift's JSON lines `{"loss": 2.23302879, "acc": 0.26443233, "grad_norm": NaN, ...}`
    r"\b(?:model|total|global|actor|critic|policy|value)_grad_norm[=:]?\s*"
    + NUMBER,  # Dreamer/RL `model_grad_norm nan`: never max_/clip_ settings
]
# Durations: named groups `value` and `unit` (ms, s, sec, us, µs; a missing unit is seconds).
VALUE = r"(?P<value>\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?)"
UNIT = r"(?P<unit>ms|us|µs|sec|s)\b"
STEP_TIME = [
    r"elapsed time per iteration \((?P<unit>ms)\):\s*" + VALUE,  # Megatron
    r"\btrain_step_timing in s:\s*" + VALUE,  # NeMo
    r"(?i)\b(?:step|iter(?:ation)?|batch)[_ ]?time[=:]?\s*" + VALUE + r"\s*" + UNIT,
    r"(?:^|[,|]\s*)time[=:]?\s*" + VALUE + r"\s*" + UNIT,  # nanoGPT `, time 562.66ms`
    r"\btime: " + VALUE + r"\s+data: ",  # the DeiT/MAE/DETR MetricLogger `time: 4.5833  data: 0.0002` (seconds)
    r"\btime: " + VALUE + r",?\s+data_time: ",  # OpenMMLab's `eta: 1:58:36, time: 0.559, data_time: 0.061` (seconds)
    VALUE + r"\s*(?P<unit>ms|sec|s)/(?:step|it|iter)\b",  # RETURNN `3.249 sec/step`, tqdm `1.47s/it`
    r"\bTime:?\s+" + VALUE + r"\s+\(\s*\d",  # AverageMeter `Time 0.783 (2.771)`: the current value (s), then the running mean
]
ITERS_PER_SECOND = VALUE + r"\s*it/s\b"  # tqdm when faster than one step a second
DATA_TIME = [
    r"(?i)\bdata(?:[ _-]?(?:loading|load))?[ _]time \((?P<unit>ms|s)\):\s*" + VALUE,
    r"(?i)\bdata(?:[ _-]?(?:loading|load))?[ _]time[=:]?\s*" + VALUE + r"\s*" + UNIT,
    r"\bData:?\s+" + VALUE + r"\s+\(\s*\d",  # AverageMeter `Data 0.006 (1.204)`
    r"\btime: \d[\d.]*,?\s+data_time: " + VALUE + r"\b",  # OpenMMLab's, after its step time (seconds)
]
# A per-phase timing breakdown names the loss computation's time, not its value: `| Loss: 71.2ms |`.
LOSS_AS_DURATION = r"(?i)\bloss\s*[=:]\s*\d[\d.]*\s*(?:ms|us|µs|s|sec)\b"

LOSS_SCALE = [
    r"\bAttempted loss scale: [\d.]+, reducing to\s*" + NUMBER,  # DeepSpeed overflow: the new scale
    r"\bloss[ _]scale[=:]\s*" + NUMBER,  # Megatron `loss scale: 1.0`, fairseq `loss_scale=0.25`
    r"\|\s*loss_scale\s+" + NUMBER,  # fairseq's simple progress `| clip 0.000 | oom 0.000 | loss_scale 0.000 |`
    r"\b(?:setting|reducing) loss scale to:?\s*" + NUMBER,  # fairseq/apex overflow notes
    r"(?i)\bgrad[ _]scale(?: is small)?[=:]\s*" + NUMBER,  # torch GradScaler as icefall logs it: `grad_scale: 2.0`
]
# The scale's base-2 logarithm: OpenAI's fp16 trainers (guided-diffusion) `| lg_loss_scale | -1.62e+04 |`
# and `Found NaN, decreased lg_loss_scale to -16203.354`.
LG_LOSS_SCALE = [
    r"^\|\s*lg_loss_scale\s*\|\s*" + NUMBER,
    r"\bdecreased lg_loss_scale to\s*" + NUMBER,
]
LEARNING_RATE = [
    r"\blearning rate:\s*" + NUMBER,  # Megatron `learning rate: 9.150E-06`
    r"'learning_rate': '?" + NUMBER,  # HF Trainer dict
    r"\blr=\[" + NUMBER,  # DeepSpeed `lr=[4.99e-05, 4.99e-05]`: the first group's
    r"(?i)(?:^|[\s,|])lr ?[=:]\s*" + NUMBER,  # NeMo 2 `| lr: 3e-05 |`, plain `lr=0.001`, Caffe `lr = 0.0001`
]
TOKENS_PER_SECOND = [
    r"\btps:\s*" + NUMBER,  # torchtitan `tps: 193,831`
    r"(?i)\btok(?:en)?s?[ _]?(?:/|per[ _])\s?s(?:ec(?:ond)?)?[=:]?\s*" + NUMBER,  # `tokens/s: 1234`, `tokens_per_second=`
    NUMBER + r"\s*tok(?:en)?s?/s(?:ec)?\b",  # `12,345 tokens/s`
]
SAMPLES_PER_SECOND = [
    r"\bCurrSamplesPerSec=" + NUMBER,  # DeepSpeed timer
    r"(?i)samples[ _](?:per[ _]second|/s)'?[=:]?\s*'?" + NUMBER,  # Megatron-DeepSpeed, HF `'train_samples_per_second': 4.9`
    NUMBER + r"\s*samples/s\b",
]
TFLOPS = [
    r"\bthroughput per GPU \(TFLOP/s/GPU\):\s*" + NUMBER,  # Megatron --log-throughput
    r"(?i)\btflops(?:/s)?[=:]\s*" + NUMBER,  # torchtitan `tflops: 18.36`, Megatron-DeepSpeed `TFLOPs: 78.36`
]
MFU = r"(?i)\bmfu[=:]?\s*(?P<value>\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?)\s*(?P<percent>%)?"
# Memory: named groups `value` and `unit`; the unit is required.
MEMORY_UNIT = r"(?P<unit>GiB|GB|MiB|MB)\b"
MEMORY_ALLOCATED = [
    r"\bmemory:\s*" + VALUE + r"\s*" + MEMORY_UNIT,  # torchtitan `memory: 66.91GiB(37.51%)`
    r"\bMemAllocated=" + VALUE + MEMORY_UNIT,  # DeepSpeed timer
    r"(?i)\bmem(?:ory)?[ _]allocated[=:]?\s*" + VALUE + r"\s*" + MEMORY_UNIT,
    r"\bmemory \((?P<unit>MB)\) \| allocated:\s*" + VALUE,  # Megatron memory report
]
MEMORY_RESERVED = [
    r"(?i)\bmem(?:ory)?[ _]reserved[=:]?\s*" + VALUE + r"\s*" + MEMORY_UNIT,
    r"\bmemory \((?P<unit>MB)\) \|.*?\|\s*reserved:\s*" + VALUE,  # Megatron memory report
]
SECONDS_PER = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6}
# Training frameworks print bytes / 1024**3 as "GB" (DeepSpeed, Megatron, torch's own summaries): binary units.
GIB_PER = {"gib": 1.0, "gb": 1.0, "mib": 1 / 1024, "mb": 1 / 1024}
CANDIDATE = r"(?i)iter|step|tick|loss|cross_entropy|\| T: |scale|/it|it/s|/s|per[ _]sec|tflop|mfu|mem|epoch|^\s*\d+/\d+\s+\d+(?:\.\d+)?G\s"


def _first(patterns: list[str]) -> pl.Expr:
    return pl.coalesce([pl.col("text").str.extract(p) for p in patterns])


def _float(expr: pl.Expr) -> pl.Expr:
    return expr.str.replace_all(",", "", literal=True).str.replace(r"^([-+]?)0+([nNiI])", "${1}${2}").cast(pl.Float64, strict=False)


def _scaled(pattern: str, factors: dict[str, float], default: float | None) -> pl.Expr:
    """The quantity `pattern` captures (groups `value`, `unit`) times its unit's factor.

    A missing unit group means `default` (None: no value); an unknown unit gives no value.
    """
    groups = pl.col("text").str.extract_groups(pattern)
    unit = groups.struct.field("unit") if "(?P<unit>" in pattern else pl.lit(None, pl.String)
    factor = unit.str.to_lowercase().replace_strict(factors, default=None, return_dtype=pl.Float64)
    if default is not None:
        factor = factor.fill_null(default)
    return _float(groups.struct.field("value")) * factor


def _durations(patterns: list[str]) -> pl.Expr:
    """Seconds; a duration logged without a unit is in seconds (`train_step_timing in s`)."""
    return pl.coalesce([_scaled(p, SECONDS_PER | {"s": 1.0, "sec": 1.0}, 1.0) for p in patterns])


def _gibibytes(patterns: list[str]) -> pl.Expr:
    return pl.coalesce([_scaled(p, GIB_PER, None) for p in patterns])


def _mfu_percent() -> pl.Expr:
    """MFU in percent: `mfu: 34.29%` as is, a bare fraction (`mfu=0.43`, at most 1) times 100."""
    groups = pl.col("text").str.extract_groups(MFU)
    value = _float(groups.struct.field("value"))
    percent = groups.struct.field("percent").is_not_null()
    return pl.when(percent).then(value).when(value <= 1.0).then(value * 100.0).otherwise(None)


# A line is a metric row when it carries one of these (grad norm and times come with a step).
MEASURES = ("step", "epoch", "loss", "loss_scale", "lr", "tokens_per_s", "samples_per_s", "tflops", "mfu_pct", "memory_allocated_gib")


def _base_2_scale() -> pl.Expr:
    """2 ** the logged base-2 loss scale; null where that overflows (no trainer logs a scale past 2**1023)."""
    scale = pl.lit(2.0).pow(_float(_first(LG_LOSS_SCALE)))
    return pl.when(scale.is_finite()).then(scale)


def extract_metrics(lines: pl.DataFrame) -> pl.DataFrame:
    """METRICS rows for every line that carries a step, a loss, a loss scale, a learning rate,
    a throughput or an allocated-memory figure."""
    if lines.is_empty():
        return empty(METRICS)
    candidates = lines.lazy().filter(pl.col("text").str.contains(CANDIDATE))
    metrics = (
        candidates.with_columns(
            step=_float(_first(STEP)).cast(pl.Int64, strict=False),
            epoch=pl.col("text").str.extract(EPOCH).cast(pl.Int64, strict=False),
            loss=pl.when(pl.col("text").str.contains(LOSS_AS_DURATION)).then(None).otherwise(_float(_first(LOSS))),
            grad_norm=_float(_first(GRAD_NORM)),
            step_time_s=pl.coalesce(_durations(STEP_TIME), 1.0 / _float(pl.col("text").str.extract(ITERS_PER_SECOND))),
            data_time_s=_durations(DATA_TIME),
            loss_scale=pl.coalesce(_float(_first(LOSS_SCALE)), _base_2_scale()),
            lr=_float(_first(LEARNING_RATE)),
            tokens_per_s=_float(_first(TOKENS_PER_SECOND)),
            samples_per_s=_float(_first(SAMPLES_PER_SECOND)),
            tflops=_float(_first(TFLOPS)),
            mfu_pct=_mfu_percent(),
            memory_allocated_gib=_gibibytes(MEMORY_ALLOCATED),
            memory_reserved_gib=_gibibytes(MEMORY_RESERVED),
        )
        .filter(pl.any_horizontal(pl.col(name).is_not_null() for name in MEASURES))
        .collect()
    )
    return conform(metrics, METRICS)
