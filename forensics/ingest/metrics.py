"""Training-metric lines -> the METRICS frame (step, loss, grad norm, step time, loss scale).

Formats from reference/formats.md 6: Megatron `iteration N/ M | ... lm loss: ... |`,
torchtitan `step: N  loss: X`, DeepSpeed `step=N, skipped=`, NeMo 2 `iteration N/M |
reduced_train_loss: ...`, Lightning `global_step=...`, HF Trainer dicts `{'loss': ...}`,
plain `step N ... loss X` prints, and fp16 loss-scale notes (`reducing loss scale to 2.0`). A cheap literal filter selects candidate lines, then
one short `str.extract` per field runs on those only (fast: performance.md).
"""

from __future__ import annotations

import polars as pl

from forensics.schema import METRICS, conform, empty

NUMBER = r"([-+]?(?:\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?|(?i:nan|-?inf)))"

STEP = [
    r"\biteration\s+(\d+)\s*/",  # Megatron, NeMo 2
    r"\bglobal_step[=:]\s*(\d+(?:\.\d+)?(?:e\+\d+)?)",  # Lightning / NeMo bar (may be 3.2e+4)
    r"(?i)\bstep(?:[=:]\s*|\s+)(\d+)\b",  # torchtitan `step: 22`, DeepSpeed `step=10`, `Step 120, Loss:`
    r"\biter\s+(\d+)\b",  # nanoGPT `iter 1639: loss 3.9185, time 562.66ms`
    r"'step': '?(\d+)",  # HF dict with a step callback
]
LOSS = [
    r"\blm loss:\s*" + NUMBER,
    r"\breduced_train_loss[=:]\s*" + NUMBER,
    r"'loss': '?" + NUMBER,
    r"(?i)\bloss[=:]\s*" + NUMBER,
    r"(?i)\bloss\]?\s+" + NUMBER + r"\b",  # `loss 2.31`, `[Loss] nan`
]
GRAD_NORM = [r"\bgrad[ _]norm[=:]?\s*" + NUMBER, r"'grad_norm': '?" + NUMBER]
# Durations: named groups `value` and `unit` (ms, s, sec, us, µs; a missing unit is seconds).
VALUE = r"(?P<value>\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?)"
UNIT = r"(?P<unit>ms|us|µs|sec|s)\b"
STEP_TIME = [
    r"elapsed time per iteration \((?P<unit>ms)\):\s*" + VALUE,  # Megatron
    r"\btrain_step_timing in s:\s*" + VALUE,  # NeMo
    r"(?i)\b(?:step|iter(?:ation)?|batch)[_ ]?time[=:]?\s*" + VALUE + r"\s*" + UNIT,
    r"(?:^|[,|]\s*)time[=:]?\s*" + VALUE + r"\s*" + UNIT,  # nanoGPT `, time 562.66ms`
    VALUE + r"\s*(?P<unit>ms|sec|s)/(?:step|it|iter)\b",  # RETURNN `3.249 sec/step`, tqdm `1.47s/it`
]
ITERS_PER_SECOND = VALUE + r"\s*it/s\b"  # tqdm when faster than one step a second
DATA_TIME = [
    r"(?i)\bdata(?:[ _-]?(?:loading|load))?[ _]time \((?P<unit>ms|s)\):\s*" + VALUE,
    r"(?i)\bdata(?:[ _-]?(?:loading|load))?[ _]time[=:]?\s*" + VALUE + r"\s*" + UNIT,
]
LOSS_SCALE = [
    r"\bAttempted loss scale: [\d.]+, reducing to\s*" + NUMBER,  # DeepSpeed overflow: the new scale
    r"\bloss[ _]scale[=:]\s*" + NUMBER,  # Megatron `loss scale: 1.0`, fairseq `loss_scale=0.25`
    r"\b(?:setting|reducing) loss scale to:?\s*" + NUMBER,  # fairseq/apex overflow notes
]
SECONDS_PER = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6}
CANDIDATE = r"(?i)iter|step|loss|/it|it/s"


def _first(patterns: list[str]) -> pl.Expr:
    return pl.coalesce([pl.col("text").str.extract(p) for p in patterns])


def _float(expr: pl.Expr) -> pl.Expr:
    return expr.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


def _seconds(pattern: str) -> pl.Expr:
    """The duration `pattern` captures (groups `value`, `unit`), in seconds."""
    groups = pl.col("text").str.extract_groups(pattern)
    unit = groups.struct.field("unit") if "(?P<unit>" in pattern else pl.lit(None, pl.String)
    factor = unit.str.to_lowercase().replace_strict(SECONDS_PER, default=1.0, return_dtype=pl.Float64)
    return _float(groups.struct.field("value")) * factor


def _durations(patterns: list[str]) -> pl.Expr:
    return pl.coalesce([_seconds(p) for p in patterns])


def extract_metrics(lines: pl.DataFrame) -> pl.DataFrame:
    """METRICS rows for every line that carries a step number or a loss."""
    if lines.is_empty():
        return empty(METRICS)
    candidates = lines.lazy().filter(pl.col("text").str.contains(CANDIDATE))
    metrics = (
        candidates.with_columns(
            step=_float(_first(STEP)).cast(pl.Int64, strict=False),
            loss=_float(_first(LOSS)),
            grad_norm=_float(_first(GRAD_NORM)),
            step_time_s=pl.coalesce(_durations(STEP_TIME), 1.0 / _float(pl.col("text").str.extract(ITERS_PER_SECOND))),
            data_time_s=_durations(DATA_TIME),
            loss_scale=_float(_first(LOSS_SCALE)),
        )
        .filter(pl.col("step").is_not_null() | pl.col("loss").is_not_null() | pl.col("loss_scale").is_not_null())
        .collect()
    )
    return conform(metrics, METRICS)
