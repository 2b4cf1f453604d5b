# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # Profiler traces: GPU time per rank and collective skew
#
# `fixtures/traces/straggler_4rank` holds four torch.profiler traces built by
# `fixtures/traces/generate.py`: 3 steps of 10 ms, and in every step rank 2's compute runs
# 4000 us longer, so the other three ranks wait for it in each all-reduce. This notebook
# calls the same library functions as `forensics traces` (the per-rank breakdown) and as
# the trace step of `forensics analyze` (matching collectives across ranks).

# %%
import importlib.util
import inspect
import tempfile
from pathlib import Path

import polars as pl

import forensics
from forensics.discover import discover
from forensics.ingest.traces import load_traces
from forensics.passes.collective_alignment import align_collectives
from forensics.passes.trace_breakdown import breakdown_frame, kernel_type_breakdown, trace_breakdown
from forensics.report.trace_figures import breakdown_bars, skew_heatmap
from forensics.schema import InputKind, InputStatus

repo = Path.cwd() if (Path.cwd() / "fixtures").is_dir() else Path.cwd().parent
traces = repo / "fixtures" / "traces" / "straggler_4rank"
found = discover(traces).filter(pl.col("kind") == InputKind.TRACE)
loads = [t for t in load_traces([traces / p for p in found["path"]]) if t.status != InputStatus.SKIPPED]
pl.DataFrame(
    {
        "file": [t.path.name for t in loads],
        "rank": [t.rank for t in loads],
        "status": [str(t.status) for t in loads],
        "events": [t.events.height for t in loads],
    }
)

# %% [markdown]
# ## How the fixture was built
# The defaults of `straggler_rank()` in the generator: which rank is late, and by how much.

# %%
spec = importlib.util.spec_from_file_location("generate_traces", repo / "fixtures" / "traces" / "generate.py")
generate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generate)
built = {
    name: p.default for name, p in inspect.signature(generate.straggler_rank).parameters.items() if p.default is not inspect.Parameter.empty
}
built

# %% [markdown]
# ## GPU time breakdown per rank
# `forensics traces DIR --format json` prints `trace_breakdown(loads)` for the traces that
# discovery finds under DIR; `breakdown_frame` is the same table as a frame. Holistic Trace Analysis's definitions: the last profiler step
# is dropped, so two of the three steps count.

# %%
cli_rows = pl.DataFrame(trace_breakdown(loads))
breakdown = breakdown_frame(loads).sort("rank")
breakdown.drop("file")

# %% [markdown]
# GPU time by the kernel types running at once, summed over ranks.

# %%
kernel_types = kernel_type_breakdown(loads)
kernel_types

# %% [markdown]
# ## Collective skew across ranks
# Each all-reduce is matched across ranks. A collective kernel spins until its last peer
# arrives, so the rank with the shortest kernel arrived last. `arrival_lag_us` is how long
# after the first rank each rank started the collective.

# %%
alignment = align_collectives(loads)
alignment.collectives

# %%
skew = (
    alignment.arrivals.pivot(on="rank", index="collective", values="arrival_lag_us", aggregate_function="max")
    .sort("collective")
    .rename(lambda c: c if c == "collective" else f"rank {c}")
)
skew

# %% [markdown]
# Per rank: the waiting it caused the others, how often it was last, and how long it worked
# between collectives compared with the median rank (`slowdown`).

# %%
alignment.ranks

# %%
alignment.stragglers

# %% [markdown]
# ## The figures `forensics analyze` draws from these frames

# %%
figures_dir = Path(tempfile.mkdtemp(prefix="forensics-traces-"))
pngs = [breakdown_bars(breakdown, figures_dir), skew_heatmap(alignment.arrivals, figures_dir)]
try:
    from IPython.display import Image, display
except ImportError:  # plain `python trace_breakdown.py`: name the files instead
    display, Image = print, lambda filename: filename
display(Image(filename=str(pngs[1])))
pngs

# %% [markdown]
# ## The same folder through `forensics.analyze`

# %%
analysis = forensics.analyze(traces)
{"category": analysis.verdict.category, "culprit_ranks": analysis.verdict.culprit_ranks, "summary": analysis.verdict.summary}

# %% [markdown]
# ## Checks
# Every number below follows from how `generate.py` built the traces.

# %%
LATE_RANK, DELAY_US, WORLD, STEPS = 2, 4000, 4, 3  # straggler_rank(world=4, steps=3, late_rank=2, delay=4000)
assert built == {"world": WORLD, "steps": STEPS, "late_rank": LATE_RANK, "delay": DELAY_US}
KEPT = STEPS - 1  # HTA drops the last profiler step
STEP_US, GEMM_US, ELEMENTWISE_US = 10_000, 3000, 200

# The CLI's JSON is the breakdown frame.
assert cli_rows.equals(breakdown.drop("file"))
assert breakdown["rank"].to_list() == list(range(WORLD))

# Same span on every rank: first kernel at +200 us, last memcpy ends at +7850 us of the last kept step.
assert (breakdown["kernel_time_us"] == (KEPT - 1) * STEP_US + 7850 - 200).all()
assert breakdown["idle_time_us"].n_unique() == 1
# Compute: gemm + elementwise per kept step; the late rank's gemm runs DELAY_US longer.
late = pl.col("rank") == LATE_RANK
assert breakdown.filter(late)["compute_time_us"].to_list() == [KEPT * (GEMM_US + DELAY_US + ELEMENTWISE_US)]
assert (breakdown.filter(~late)["compute_time_us"] == KEPT * (GEMM_US + ELEMENTWISE_US)).all()
assert breakdown.sort("compute_time_pctg", descending=True)["rank"][0] == LATE_RANK

# Every all-reduce: rank 2 is last, DELAY_US after the others, and each of them waited DELAY_US.
collectives = alignment.collectives
assert collectives.height == STEPS and (collectives["op"] == "allreduce").all()
assert (collectives["late_rank"] == LATE_RANK).all() and (collectives["last_started_rank"] == LATE_RANK).all()
assert (collectives["start_skew_us"] == DELAY_US).all()
assert (collectives["wait_caused_us"] == (WORLD - 1) * DELAY_US).all()
assert (skew[f"rank {LATE_RANK}"] == DELAY_US).all()
assert (skew.drop("collective", f"rank {LATE_RANK}").max_horizontal() == 0).all()

# The rank table and the straggler finding name rank 2 alone.
top = alignment.ranks.row(0, named=True)
assert top["rank"] == LATE_RANK and top["times_late"] == STEPS and top["wait_share"] == 1.0
assert top["wait_caused_us"] == STEPS * (WORLD - 1) * DELAY_US
assert (alignment.ranks.filter(~late)["wait_caused_us"] == 0).all()
assert [s["rank"] for s in alignment.stragglers] == [LATE_RANK]
assert alignment.findings.select("pattern", "role", "rank").rows() == [("TRACE-STRAGGLER", "initiating", LATE_RANK)]

# The full analysis agrees: a straggler, rank 2, from the same breakdown.
assert analysis.verdict.category == "STRAGGLER" and analysis.verdict.culprit_ranks == [LATE_RANK]
assert analysis.incident.tables["trace_breakdown"].sort("rank").drop("file").equals(breakdown.drop("file"))
assert all(p is not None and p.stat().st_size > 0 for p in pngs)
