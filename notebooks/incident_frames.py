# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # One incident through the Python API
#
# `forensics.analyze` runs what `forensics analyze` runs and hands back the verdict and the
# frames as Polars data frames. This notebook looks at the bundled
# `cuda_oom_8rank_cascade` incident (rank 5 runs out of GPU memory; its node's peers are
# stopped, the other node's four ranks hit the NCCL watchdog ten minutes later), then writes
# the report with `frames=True` and reads the Parquet files back with Polars and DuckDB.

# %%
import json
import tempfile
from pathlib import Path

import duckdb
import polars as pl

import forensics

repo = Path.cwd() if (Path.cwd() / "fixtures").is_dir() else Path.cwd().parent
incident = repo / "fixtures" / "incidents" / "cuda_oom_8rank_cascade"
analysis = forensics.analyze(incident)
verdict = analysis.verdict
first = verdict.first_failure or {}
{
    "category": verdict.category,
    "state": verdict.state,
    "confidence": verdict.confidence,
    "culprit_ranks": verdict.culprit_ranks,
    "culprit_hosts": verdict.culprit_hosts,
    "first_failure": f"{first.get('file')}:{first.get('line')}",
    "summary": verdict.summary,
}

# %% [markdown]
# ## Which evidence fired, by role
# Initiating findings can start an incident by themselves; cascade and teardown findings
# are the other ranks and the launcher reacting.

# %%
findings = analysis.incident.findings
by_role = (
    findings.group_by("role", "category")
    .agg(findings=pl.len(), ranks=pl.col("rank").drop_nulls().n_unique())
    .sort("findings", "role", "category", descending=[True, False, False])
)
by_role

# %% [markdown]
# ## Last line per rank
# The last timestamped line each rank wrote. Ranks 4, 6 and 7 were stopped with rank 5;
# ranks 0-3 kept waiting in an all-reduce until the watchdog gave up.

# %%
last_line = (
    analysis.incident.lines.filter(pl.col("rank").is_not_null() & pl.col("time").is_not_null())
    .sort("time", "file", "line")
    .group_by("rank")
    .agg(pl.col("time").last().alias("last_time"), pl.col("file").last(), pl.col("line").last(), pl.col("text").last())
    .sort("rank")
)
last_line

# %% [markdown]
# ## Step time per rank
# These logs print the step number but no step time, so the `step_times` table derives it
# from the time between logged steps.

# %%
step_time = (
    analysis.incident.tables["step_times"]
    .filter(pl.col("step_time_s").is_not_null())
    .group_by("rank")
    .agg(steps=pl.len(), last_step=pl.col("step").max(), median_step_time_s=pl.col("step_time_s").median())
    .sort("rank")
)
step_time

# %% [markdown]
# ## Write the report with its frames
# `write_report(..., frames=True)` writes `postmortem.md`, `verdict.json`, `figures/` and
# one Parquet file per frame under `frames/`.

# %%
out = Path(tempfile.mkdtemp(prefix="forensics-notebook-"))
written = forensics.write_report(analysis, out, frames=True)
frames_dir = out / "frames"
sorted(p.relative_to(out).as_posix() for p in written)

# %% [markdown]
# ### Read back with Polars
# The five core frames documented in `forensics.FRAME_DOCS`, with their file metadata.

# %%
read_back = {name: pl.read_parquet(frames_dir / f"{name}.parquet") for name in forensics.FRAME_DOCS}
metadata = {name: pl.read_parquet_metadata(frames_dir / f"{name}.parquet") for name in forensics.FRAME_DOCS}
pl.DataFrame(
    {
        "frame": list(read_back),
        "rows": [frame.height for frame in read_back.values()],
        "columns": [frame.width for frame in read_back.values()],
        "forensics.frame": [m.get("forensics.frame") for m in metadata.values()],
        "forensics.schema_version": [m.get("forensics.schema_version") for m in metadata.values()],
    }
)

# %% [markdown]
# ### Read back with DuckDB
# The metadata of every written frame (core frames and pass tables), and the findings by
# role again, this time in SQL over the Parquet file.

# %%
con = duckdb.connect()
file_metadata = (
    con.sql(
        f"""
        SELECT parse_filename(file_name, true) AS file, decode(key) AS key, decode(value) AS value
        FROM parquet_kv_metadata('{frames_dir}/*.parquet')
        WHERE decode(key) LIKE 'forensics.%'
        """
    )
    .pl()
    .pivot(on="key", index="file", values="value")
    .sort("file")
)
duckdb_columns = {
    name: con.sql(f"DESCRIBE SELECT * FROM read_parquet('{frames_dir / name}.parquet')").pl()["column_name"].to_list()
    for name in forensics.FRAME_DOCS
}
sql_by_role = con.sql(
    f"""
    SELECT role, category, count(*) AS findings, count(DISTINCT rank) AS ranks
    FROM read_parquet('{frames_dir}/findings.parquet')
    GROUP BY ALL
    ORDER BY findings DESC, role, category
    """
).pl()
file_metadata

# %%
sql_by_role

# %% [markdown]
# ## A figure from the report
# `figures/` holds the GPU and profiler-trace plots; an incident with neither (like this
# one) gets none.

# %%
pngs = sorted((out / "figures").glob("*.png"))
try:
    from IPython.display import Image, display
except ImportError:  # plain `python incident_frames.py`: name the file instead
    display, Image = print, lambda filename: filename
if pngs:
    display(Image(filename=str(pngs[0])))
else:
    print("no figures: this incident has no GPU dumps or profiler traces")
pngs

# %% [markdown]
# ## Checks
# What the notebook shows must match what the fixture was built with (`expected.json`,
# `fixtures/README.md`).

# %%
expected = json.loads((incident / "expected.json").read_text())

# The verdict: rank 5 on hgx-a100-018 ran out of GPU memory.
assert verdict.category == expected["category"] == "CUDA_OOM"
assert verdict.state == expected["state"]
assert verdict.culprit_ranks == expected["culprit_ranks"] == [5]
assert verdict.culprit_hosts == expected["culprit_hosts"]
assert first["file"] == "rank_5.log" and "OutOfMemoryError" in first["text"]

# Only rank 5's OOM initiates; only ranks 0-3 (the other node) time out in cascade.
assert by_role.filter(pl.col("role") == "initiating").rows() == [("initiating", "CUDA_OOM", 1, 1)]
assert findings.filter(pl.col("role") == "initiating")["rank"].to_list() == [5]
assert sorted(findings.filter(pl.col("role") == "cascade")["rank"].unique().to_list()) == [0, 1, 2, 3]

# Ranks 4, 6, 7 end on their step-410 line; ranks 0-3 go quiet ~600 s (the watchdog timeout) after node 018.
stopped = last_line.filter(pl.col("rank").is_in([4, 6, 7]))
assert stopped["text"].str.contains("step: 410", literal=True).all()
waited = last_line.filter(pl.col("rank") < 4)
gap_s = (waited["last_time"].min() - last_line.filter(pl.col("rank") >= 4)["last_time"].max()).total_seconds()
assert abs(gap_s - 600) < 10, gap_s

# Steps every 1.46 s on every rank, all reaching step 410.
assert step_time["rank"].to_list() == list(range(8))
assert (step_time["last_step"] == 410).all()
assert ((step_time["median_step_time_s"] - 1.46).abs() < 0.01).all()

# The Parquet files: same rows, documented columns and dtypes, and the schema version.
for name, doc in forensics.FRAME_DOCS.items():
    assert read_back[name].columns == list(doc.columns) == duckdb_columns[name], name
    assert read_back[name].schema == pl.Schema({column: dtype for column, (dtype, _) in doc.columns.items()}), name
    assert read_back[name].equals(getattr(analysis.incident, name)), name
    assert metadata[name]["forensics.frame"] == name
    assert metadata[name]["forensics.schema_version"] == str(forensics.SCHEMA_VERSION)
assert set(forensics.FRAME_DOCS) <= set(file_metadata["file"])
assert (file_metadata["forensics.frame"] == file_metadata["file"]).all()
assert (file_metadata["forensics.schema_version"] == str(forensics.SCHEMA_VERSION)).all()
assert sql_by_role.equals(by_role.with_columns(pl.col("findings").cast(pl.Int64), pl.col("ranks").cast(pl.Int64)))

# Figures: what write_report says it wrote is what is on disk.
assert pngs == sorted(p for p in written if p.suffix == ".png")
