# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # A fleet of incidents in DuckDB
#
# `forensics batch ROOT --out OUT` analyzes every subfolder of ROOT as one incident and
# writes `OUT/index.parquet` (one row per incident: category, confidence, culprits, ...)
# and `OUT/fleet.md`. Here the batch runs over the bundled `fixtures/incidents`, and DuckDB
# answers fleet questions from the index: what fails most, which hosts keep failing, and
# how sure the verdicts are.

# %%
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import polars as pl

repo = Path.cwd() if (Path.cwd() / "fixtures").is_dir() else Path.cwd().parent
incidents = repo / "fixtures" / "incidents"
out = Path(tempfile.mkdtemp(prefix="forensics-fleet-"))
batch = subprocess.run(
    [sys.executable, "-m", "forensics.cli", "batch", str(incidents), "--out", str(out), "--jobs", str(min(4, os.cpu_count() or 1))],
    check=True,
    capture_output=True,
    text=True,
)
print(batch.stdout.strip())

con = duckdb.connect()
con.sql(f"CREATE VIEW fleet AS SELECT * FROM read_parquet('{out / 'index.parquet'}')")
con.sql("SELECT id, category, state, confidence, culprit_ranks, culprit_hosts, error FROM fleet ORDER BY id").pl()

# %% [markdown]
# ## Incidents per category

# %%
per_category = con.sql(
    """
    SELECT category, count(*) AS incidents, round(100 * count(*) / sum(count(*)) OVER (), 1) AS share_pct
    FROM fleet WHERE error IS NULL
    GROUP BY category ORDER BY incidents DESC, category
    """
).pl()
per_category

# %% [markdown]
# ## Culprit hosts in two or more incidents

# %%
repeat_hosts = con.sql(
    """
    SELECT host, count(*) AS incidents, list(DISTINCT category ORDER BY category) AS categories, list(id ORDER BY id) AS ids
    FROM (SELECT id, category, unnest(culprit_hosts) AS host FROM fleet WHERE error IS NULL)
    GROUP BY host HAVING count(*) >= 2
    ORDER BY incidents DESC, host
    """
).pl()
repeat_hosts

# %% [markdown]
# ## Confidence by category

# %%
confidence = con.sql(
    """
    SELECT category, count(*) AS incidents, round(avg(confidence), 2) AS mean,
           min(confidence) AS min, max(confidence) AS max
    FROM fleet WHERE error IS NULL
    GROUP BY category ORDER BY mean DESC, category
    """
).pl()
confidence

# %% [markdown]
# ## Against the fixtures' `expected.json`
# Each fixture folder says which verdict its analysis must reach. Rows below are
# disagreements; none are expected.

# %%
con.sql(
    f"""
    CREATE VIEW expected AS
    SELECT regexp_extract(filename, '([^/]+)/expected\\.json$', 1) AS id, category, culprit_ranks, source
    FROM read_json('{incidents}/*/expected.json', filename = true, union_by_name = true)
    """
)
category_diff = con.sql(
    """
    SELECT category, e.incidents AS expected, f.incidents AS analyzed
    FROM (SELECT category, count(*) AS incidents FROM expected GROUP BY category) e
    FULL JOIN (SELECT category, count(*) AS incidents FROM fleet WHERE error IS NULL GROUP BY category) f USING (category)
    WHERE e.incidents IS DISTINCT FROM f.incidents
    """
).pl()
incident_diff = con.sql(
    """
    SELECT id, e.category AS expected, f.category AS analyzed, e.culprit_ranks AS expected_ranks, f.culprit_ranks AS ranks
    FROM expected e FULL JOIN fleet f USING (id)
    WHERE e.category IS DISTINCT FROM f.category OR list_sort(e.culprit_ranks) IS DISTINCT FROM list_sort(f.culprit_ranks)
    """
).pl()
incident_diff

# %% [markdown]
# ## Checks

# %%
fixture_dirs = sorted(p.name for p in incidents.iterdir() if p.is_dir())
index_ids = con.sql("SELECT id FROM fleet WHERE error IS NULL ORDER BY id").pl()["id"].to_list()
assert index_ids == fixture_dirs, "every fixture folder is one analyzed incident"

# Incidents per category are the fixtures' expected categories, and so is each incident's verdict.
expected_counts = con.sql("SELECT category, count(*) AS incidents FROM expected GROUP BY category ORDER BY incidents DESC, category").pl()
assert per_category.select("category", "incidents").equals(expected_counts)
assert category_diff.is_empty(), category_diff
assert incident_diff.is_empty(), incident_diff

# The only hosts that keep failing are those the real torchrun fixtures ran on (fixtures/README.md):
# `localhost` for the CPU runs, `vm` for the GPU runs; every hand-made fixture names its own hosts.
assert sorted(repeat_hosts["host"].to_list()) == ["localhost", "vm"]
real_runs = con.sql("SELECT id FROM expected WHERE source LIKE 'real torchrun%'").pl()["id"]
assert repeat_hosts.explode("ids")["ids"].is_in(real_runs.implode()).all()

# Confidences are probabilities, and the verdict with no category to offer is the least sure.
assert confidence["min"].min() > 0 and confidence["max"].max() <= 1
assert confidence["category"][-1] == "UNKNOWN"

# fleet.md reports the same counts as the index.
fleet_md = (out / "fleet.md").read_text()
assert f"{len(fixture_dirs)} incidents, {len(fixture_dirs)} analyzed, 0 failed to analyze." in fleet_md
# Its table counts failures only; healthy runs are one sentence.
failures = per_category.filter(pl.col("category") != "NO_FAILURE")
table_rows = failures.select(pl.format("| `{}` | {} |", "category", "incidents").alias("row"))
assert table_rows.select(pl.lit(fleet_md).str.contains(pl.col("row"), literal=True).all()).item()
healthy = per_category.filter(pl.col("category") == "NO_FAILURE")["incidents"].sum()
assert f"{failures['incidents'].sum()} failures; {healthy} runs were healthy (NO_FAILURE)." in fleet_md
