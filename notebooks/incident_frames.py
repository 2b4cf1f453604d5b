# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # An incident's frames, read back from Parquet
#
# `forensics analyze DIR --frames` writes every frame of the analysis under
# `OUT/frames/*.parquet`. This notebook reads them with Polars to answer questions the
# postmortem does not: which patterns fired how often, when each rank logged its last
# line, how step time evolved. Set `FORENSICS_INCIDENT` to analyze another folder.

# %%
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

repo = Path.cwd() if (Path.cwd() / "fixtures").is_dir() else Path.cwd().parent
incident = Path(os.environ.get("FORENSICS_INCIDENT", repo / "fixtures" / "incidents" / "cuda_oom_8rank_cascade"))
out = Path(tempfile.mkdtemp(prefix="forensics-notebook-"))
subprocess.run(
    [sys.executable, "-m", "forensics.cli", "analyze", str(incident), "--out", str(out), "--frames"],
    check=True,
    capture_output=True,
)
frames = {p.stem: pl.read_parquet(p) for p in sorted((out / "frames").glob("*.parquet"))}
sorted(frames)

# %% [markdown]
# ## Which evidence fired, by role
# Initiating findings are candidates for the root cause; cascade and teardown are the
# crowd's reaction.

# %%
findings = frames["findings"]
by_role = findings.group_by("role", "category").agg(findings=pl.len(), ranks=pl.col("rank").n_unique()).sort("findings", descending=True)
by_role

# %% [markdown]
# ## When each rank went quiet
# A hang's culprit often stops logging first; a crash's victims stop at the abort.

# %%
lines = frames["lines"]
last_seen = lines.filter(pl.col("rank").is_not_null()).group_by("rank").agg(last_time=pl.col("time").max(), lines=pl.len()).sort("rank")
last_seen

# %% [markdown]
# ## Step time per rank

# %%
metrics = frames["metrics"]
step_times = metrics.filter(pl.col("step").is_not_null()).group_by("rank").agg(
    steps=pl.len(), last_step=pl.col("step").max(), median_step_time_s=pl.col("step_time_s").median()
).sort("rank")
step_times

# %%
assert findings.filter(pl.col("role") == "initiating").height >= 1, "an incident should have initiating evidence"
assert last_seen.height >= 1
