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
    r"\bstep[=:]\s*(\d+)\b",  # torchtitan `step: 22`, DeepSpeed `step=10`
    r"\bstep\s+(\d+)\b",  # plain prints: `step 12 | loss ...`
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
STEP_TIME_MS = [r"elapsed time per iteration \(ms\):\s*" + NUMBER]
STEP_TIME_S = [r"\btrain_step_timing in s:\s*" + NUMBER, r"\bstep_time[=:]?\s*" + NUMBER + r"\s*s\b"]
DATA_TIME_S = [r"\bdata_time[=:]?\s*" + NUMBER + r"\s*s\b", r"\bdata(?:loading)?[ _]time[=:]\s*" + NUMBER + r"\s*s\b"]
DATA_TIME_MS = [r"\bdata[ _-]?(?:loading|load)?[ _]?time \(ms\):\s*" + NUMBER]
LOSS_SCALE = [
    r"\bAttempted loss scale: [\d.]+, reducing to\s*" + NUMBER,  # DeepSpeed overflow: the new scale
    r"\bloss[ _]scale[=:]\s*" + NUMBER,  # Megatron `loss scale: 1.0`, fairseq `loss_scale=0.25`
    r"\b(?:setting|reducing) loss scale to:?\s*" + NUMBER,  # fairseq/apex overflow notes
]
CANDIDATE = r"(?i)iteration|step|loss"


def _first(patterns: list[str]) -> pl.Expr:
    return pl.coalesce([pl.col("text").str.extract(p) for p in patterns])


def _float(expr: pl.Expr) -> pl.Expr:
    return expr.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)


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
            step_time_s=pl.coalesce(_float(_first(STEP_TIME_MS)) / 1000.0, _float(_first(STEP_TIME_S))),
            data_time_s=pl.coalesce(_float(_first(DATA_TIME_S)), _float(_first(DATA_TIME_MS)) / 1000.0),
            loss_scale=_float(_first(LOSS_SCALE)),
        )
        .filter(pl.col("step").is_not_null() | pl.col("loss").is_not_null() | pl.col("loss_scale").is_not_null())
        .collect()
    )
    return conform(metrics, METRICS)
