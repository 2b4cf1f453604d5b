"""The `forensics` command: help text everywhere, exit codes, outputs where promised and nowhere else."""

from __future__ import annotations

import json
import os

import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from forensics.cli import app
from tests.conftest import write_files

runner = CliRunner()

OOM_LOG = (
    "[default5]:[rank5]:[W101 10:00:01.000000000 ProcessGroupNCCL.cpp:1] warmup\n"
    "[default5]:[rank5]: Traceback (most recent call last):\n"
    '[default5]:[rank5]:   File "/workspace/train.py", line 88, in <module>\n'
    "[default5]:[rank5]:     loss = model(batch)\n"
    "[default5]:[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB. GPU 5 has a total capacity of "
    "83.05 GiB of which 140.38 MiB is free. Including non-PyTorch memory, this process has 23.33 GiB memory in use. Of the "
    "allocated memory 21.92 GiB is allocated by PyTorch, and 797.79 MiB is reserved by PyTorch but unallocated.\n"
)
HEALTHY_LOG = "".join(
    f"[rank0]:[titan] 2025-03-12 11:10:{s:02d},511 - root - INFO - step: {s}  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%\n"
    for s in range(1, 20)
)
REQUIRED = {
    "schema_version",
    "tool_version",
    "incident",
    "verdict",
    "hypotheses",
    "ranks",
    "stragglers",
    "periodicity",
    "correlations",
    "inputs",
}
VERDICT_FIELDS = {"category", "state", "summary", "culprit_ranks", "culprit_hosts", "culprit_gpus", "first_failure", "confidence"}
INCIDENT_FIELDS = {"path", "world_size", "ranks_seen", "hosts", "start", "end"}
INPUT_FIELDS = {"path", "kind", "rank", "host", "status", "problem"}


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def tree(root) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def command_paths(command=None, prefix=()) -> list[tuple[str, ...]]:
    """Every command and subcommand of the app, found by walking it (new ones are covered too)."""
    command = command or typer.main.get_command(app)
    paths = [prefix]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        paths += command_paths(sub, (*prefix, name))
    return paths


@pytest.mark.parametrize("command", command_paths(), ids=lambda c: " ".join(c) or "forensics")
def test_every_command_has_help(command):
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Usage:" in result.output
    body = result.output.split("Usage:", 1)[1]
    assert len([line for line in body.splitlines() if line.strip()]) >= 3  # a description, not just the usage
    own_help = typer.main.get_command(app)
    for name in command:
        own_help = own_help.commands[name]
    assert (own_help.help or "").strip(), f"{' '.join(command)} has no help text"


def test_the_walk_finds_the_contract_commands():
    assert {("analyze",), ("patterns",), ("patterns", "list"), ("patterns", "show")} <= set(command_paths())


def test_missing_directory_is_exit_2_with_one_line(tmp_path):
    result = run("analyze", tmp_path / "nope", "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "does not exist" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_single_log_file_is_an_incident_and_its_neighbours_are_not_read(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-9411285.out").write_text(
        "srun: error: gpu20-15: task 0: Out Of Memory\n"  # knet#30-style Slurm output
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your processes may have been killed by the cgroup out-of-memory handler.\n"
    )
    (logs / "other.log").write_text("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    result = run("analyze", logs / "slurm-9411285.out", "--out", tmp_path / "out")
    assert result.exit_code == 0, result.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert verdict["verdict"]["category"] == "HOST_OOM"
    assert [i["path"] for i in verdict["inputs"]] == ["slurm-9411285.out"]
    assert (tmp_path / "out" / "postmortem.md").read_text().startswith("# Postmortem: `slurm-9411285`")


def test_version_prints_the_package_version():
    from forensics import __version__

    result = run("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"forensics {__version__}"


def test_empty_directory_is_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run("analyze", tmp_path / "empty", "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "no files" in result.stderr


def test_only_binary_junk_is_exit_2(tmp_path):
    junk = write_files(tmp_path / "junk", {f"blob{i}.bin": os.urandom(4096) for i in range(3)})
    result = run("analyze", junk, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "nothing readable" in result.stderr


def test_json_output_has_every_contract_field(incident, tmp_path):
    root = incident({"rank_5.log": OOM_LOG, "rank_0.log": HEALTHY_LOG})
    result = run("analyze", root, "--out", tmp_path / "out", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert REQUIRED <= set(doc)
    assert doc["schema_version"] == 1
    assert INCIDENT_FIELDS <= set(doc["incident"])
    assert VERDICT_FIELDS <= set(doc["verdict"])
    assert doc["verdict"]["category"] == "CUDA_OOM" and doc["verdict"]["culprit_ranks"] == [5]
    assert doc["verdict"]["first_failure"]["file"] == "rank_5.log"
    assert {i["path"] for i in doc["inputs"]} == {"rank_5.log", "rank_0.log"}
    assert all(INPUT_FIELDS <= set(i) for i in doc["inputs"])
    for hypothesis in doc["hypotheses"]:
        assert {"category", "score", "summary", "culprit_ranks", "evidence", "fixes"} <= set(hypothesis)
    assert json.loads((tmp_path / "out" / "verdict.json").read_text()) == doc


def test_frames_are_written_as_parquet(incident, tmp_path):
    root = incident({"rank_5.log": OOM_LOG})
    result = run("analyze", root, "--out", tmp_path / "out", "--frames")
    assert result.exit_code == 0, result.output
    frames = tmp_path / "out" / "frames"
    for name in ("inputs", "lines", "findings", "metrics", "ranks"):
        assert (frames / f"{name}.parquet").is_file()
    lines = pl.read_parquet(frames / "lines.parquet")
    assert lines.height == 5 and set(lines["rank"].to_list()) == {5}


def test_no_figures_writes_the_report_without_drawing(incident, tmp_path):
    root = incident({"rank_5.log": OOM_LOG, "rank_0.log": HEALTHY_LOG})
    assert run("analyze", root, "--out", tmp_path / "drawn").exit_code == 0
    assert list((tmp_path / "drawn" / "figures").glob("*.png"))  # the ranks' timeline, at least
    result = run("analyze", root, "--out", tmp_path / "plain", "--no-figures")
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "plain" / "figures").exists()
    assert "figures/" not in (tmp_path / "plain" / "postmortem.md").read_text()
    assert json.loads((tmp_path / "plain" / "verdict.json").read_text())["verdict"]["category"] == "CUDA_OOM"


def test_fail_on_critical_exits_3_on_an_oom(incident, tmp_path):
    root = incident({"rank_5.log": OOM_LOG})
    result = run("analyze", root, "--out", tmp_path / "out", "--fail-on", "critical")
    assert result.exit_code == 3
    assert (tmp_path / "out" / "postmortem.md").is_file()  # the report is still written


def test_fail_on_critical_exits_0_when_healthy(incident, tmp_path):
    root = incident({"rank_0.log": HEALTHY_LOG})
    result = run("analyze", root, "--out", tmp_path / "out", "--fail-on", "critical")
    assert result.exit_code == 0, result.output
    assert "NO_FAILURE" in result.stdout


def test_a_healthy_verdict_quotes_its_proof(incident, tmp_path):
    root = incident({"rank_0.log": HEALTHY_LOG})
    run("analyze", root, "--out", tmp_path / "out")
    last = HEALTHY_LOG.splitlines()[-1]
    proofs = json.loads((tmp_path / "out" / "verdict.json").read_text())["verdict"]["health_proofs"]
    assert [(p["kind"], p["file"], p["line"], p["text"]) for p in proofs] == [("progressing", "rank_0.log", 19, last)]
    report = (tmp_path / "out" / "postmortem.md").read_text()
    assert "## Proof of health" in report and "`rank_0.log:19`" in report and "step: 19  loss:  6.2250" in report


def test_default_out_dir_is_named_after_the_incident(tmp_path, monkeypatch):
    root = write_files(tmp_path / "job-4242", {"rank_0.log": HEALTHY_LOG})
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    result = run("analyze", root)
    assert result.exit_code == 0, result.output
    out = work / "forensics-report" / "job-4242"
    assert {"postmortem.md", "verdict.json"} <= set(os.listdir(out))


def test_writes_nothing_outside_out(tmp_path, monkeypatch):
    root = write_files(tmp_path / "incident", {"rank_5.log": OOM_LOG, "logs/attempt_0/1/stderr.log": HEALTHY_LOG})
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    result = run("analyze", root, "--out", tmp_path / "report", "--frames", "--format", "json")
    assert result.exit_code == 0, result.output
    after = {p for p in tree(tmp_path) if p != "report" and not p.startswith("report/")}
    assert after == before


def test_patterns_list_json_is_the_catalog():
    result = run("patterns", "list", "--format", "json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert rows and all({"id", "category", "role", "severity", "title"} <= set(r) for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)


def test_patterns_show_unknown_id_is_exit_2():
    result = run("patterns", "show", "NOPE999")
    assert result.exit_code == 2 and "no catalog entry" in result.stderr


def test_patterns_show_explains_a_pass_made_id_and_a_numbered_one():
    hang = run("patterns", "show", "HANG001")
    assert hang.exit_code == 0 and "forensics/passes/collectives.py" in hang.stdout and "What to do now:" in hang.stdout
    xid = run("patterns", "show", "GPU-XID79")
    assert xid.exit_code == 0 and xid.stdout.startswith("GPU-XID (xid-event)")


def test_patterns_show_prints_the_examples():
    result = run("patterns", "show", "DIST001")
    assert result.exit_code == 0
    assert "Matches, e.g.:" in result.stdout and "Does not match, e.g.:" in result.stdout
    assert "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20585" in result.stdout


def test_patterns_test_line_names_the_matching_pattern():
    line = (
        "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out."
    )
    result = run("patterns", "test", "--line", line)
    assert result.exit_code == 0 and result.stdout.startswith("DIST001 ") and '"seq":"469508"' in result.stdout
    nothing = run("patterns", "test", "--line", "all is well")
    assert nothing.exit_code == 1 and "0 match(es) over 1 line(s)" in nothing.stdout


def test_patterns_test_file_numbers_the_matching_lines(tmp_path):
    log = tmp_path / "rank5.log"
    log.write_text(OOM_LOG)
    result = run("patterns", "test", "--file", log)
    assert result.exit_code == 0
    assert any(line.startswith("5: OOM") for line in result.stdout.splitlines()), result.stdout


def test_patterns_test_one_id_runs_only_its_examples():
    from forensics.catalog.load import load_full

    dist001 = load_full([]).entry("DIST001")
    examples = len(dist001.match_examples) + len(dist001.no_match_examples)
    result = run("patterns", "test", "DIST001")
    assert result.exit_code == 0 and result.stdout.strip() == f"{examples} passed, 0 failed"
    assert examples < 20  # only DIST001's, not the whole catalog's


USER_PATTERN = """id = "SITE001"
name = "scratch-quota"
title = "Site scratch quota exceeded"
category = "CHECKPOINT_IO"
severity = "error"
role = "initiating"
literals = ["scratch quota exceeded"]
regex = '''scratch quota exceeded for (?P<user>\\w+)'''
meaning = "Our cluster's scratch filesystem refused a write."
immediate = ["Clean old checkpoints from scratch"]
structural = ["Alert at 80% of the scratch quota"]

[examples]
match = ["lustre: scratch quota exceeded for alice"]
no_match = ["scratch quota ok"]
"""


def test_a_user_pattern_folder_joins_the_catalog(tmp_path):
    mine = tmp_path / "site"
    mine.mkdir()
    (mine / "SITE001-scratch-quota.toml").write_text(USER_PATTERN)
    write_files(tmp_path / "incident", {"rank0.log": "step 1\nlustre: scratch quota exceeded for alice\n"})
    result = run("analyze", tmp_path / "incident", "--out", tmp_path / "out", "--patterns", mine, "--format", "json")
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["category"] == "CHECKPOINT_IO"
    assert run("patterns", "show", "SITE001", "--patterns", mine).exit_code == 0
    assert run("patterns", "show", "SITE001").exit_code == 2  # not built in


def test_a_bad_user_pattern_folder_is_refused_before_analysis(tmp_path):
    mine = tmp_path / "site"
    mine.mkdir()
    (mine / "SITE001-scratch-quota.toml").write_text(
        USER_PATTERN.replace('no_match = ["scratch quota ok"]', 'no_match = ["scratch quota exceeded for bob"]')
    )
    write_files(tmp_path / "incident", {"rank0.log": "step 1\n"})
    result = run("analyze", tmp_path / "incident", "--out", tmp_path / "out", "--patterns", mine)
    assert result.exit_code == 2 and "no_match example matches" in result.stderr
    assert not (tmp_path / "out").exists()
    clash = tmp_path / "clash"
    clash.mkdir()
    (clash / "OOM001-mine.toml").write_text(USER_PATTERN.replace("SITE001", "OOM001").replace("scratch-quota", "mine"))
    result = run("analyze", tmp_path / "incident", "--out", tmp_path / "out", "--patterns", clash)
    assert result.exit_code == 2 and "duplicate pattern id OOM001" in result.stderr


def test_a_failing_step_is_reported_not_fatal(tmp_path, monkeypatch):
    """A pass that raises on odd input costs its own section, never the postmortem."""
    from forensics import sources
    from forensics.steps.common import Step

    def broken(incident, progress):
        raise ValueError("unexpected shape")

    monkeypatch.setattr(sources, "PASSES", [Step("broken", broken), *sources.PASSES])
    folder = tmp_path / "incident"
    folder.mkdir()
    (folder / "rank_0.log").write_text(
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.00 GiB is free.\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["analyze", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"]["category"] == "CUDA_OOM"
    assert verdict["analysis_errors"] == ["broken step failed: ValueError: unexpected shape"]
    assert "An analysis step failed" in (out / "postmortem.md").read_text()


def test_timings_name_every_stage_on_stderr(incident, tmp_path):
    root = incident({"rank_0.log": "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"})
    result = CliRunner().invoke(app, ["analyze", str(root), "--out", str(tmp_path / "out"), "--timings"])
    assert result.exit_code == 0, result.output
    stages = [
        line.split()[0]
        for line in result.output.splitlines()
        if line and line.split()[0] in {"discover", "read", "match", "metrics", "health", "verdict", "report", "total"}
    ]
    assert stages == ["discover", "read", "match", "metrics", "health", "verdict", "report", "total"]
