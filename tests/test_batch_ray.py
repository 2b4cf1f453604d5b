"""`forensics batch --engine ray` on a local Ray instance gives the local engine's rows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forensics.batch.run import Limits, plan, run_job, run_local, run_ray

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore")]  # Ray's own deprecation notices
ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'forensics[ray]')")

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_and_local_engines_give_identical_index_rows_on_every_fixture_incident(tmp_path, local_ray):
    archive = tmp_path / "archive"
    shutil.copytree(INCIDENTS, archive)
    (archive / "empty_one").mkdir()  # an incident with no files: the same error row from both
    jobs_local = plan([archive], tmp_path / "local")
    jobs_ray = plan([archive], tmp_path / "ray")
    assert len(jobs_local) >= 40
    said: list[str] = []
    on_ray = run_ray(jobs_ray, said.append)
    locally = run_local(jobs_local, 2, lambda _: None, Limits(timeout_s=300))
    assert len(said) == len(jobs_ray) and said[-1].startswith(f"[{len(jobs_ray)}/{len(jobs_ray)}]")
    by_id = {row["id"]: row for row in locally}
    assert [row["id"] for row in on_ray] == [job.incident_id for job in jobs_ray]
    for row in on_ray:
        assert row == by_id[row["id"]], row["id"]
    assert "no files" in by_id["empty_one"]["error"]


def test_an_incident_whose_ray_worker_dies_is_an_error_row_and_the_others_complete(tmp_path, local_ray, monkeypatch):
    archive = tmp_path / "archive"
    for name in ("healthy", "cuda_oom_8rank_cascade"):
        shutil.copytree(INCIDENTS / name, archive / name)
    real_run_job = run_job

    def dies_on_healthy(job):  # defined here, so Ray ships it by value to its workers
        import os

        if job.incident_id == "healthy":
            os._exit(1)
        return real_run_job(job)

    monkeypatch.setattr("forensics.batch.run.run_job", dies_on_healthy)
    rows = {row["id"]: row for row in run_ray(plan([archive], tmp_path / "out"), lambda _: None)}
    assert rows["cuda_oom_8rank_cascade"]["category"] == "CUDA_OOM"
    assert rows["healthy"]["category"] is None and rows["healthy"]["error"].startswith("ray task failed:")
