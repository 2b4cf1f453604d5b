"""Traces inside an incident folder reach the postmortem, verdict.json and figures; `forensics traces` CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from forensics.cli import app
from tests.test_traces import CONTRACT_KEYS

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "straggler_4rank"


def test_traces_cli_json_has_contract_fields():
    result = CliRunner().invoke(app, ["traces", str(TRACES), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    for row in rows:
        assert set(CONTRACT_KEYS) <= row.keys()
        parts = row["idle_time_pctg"] + row["compute_time_pctg"] + row["non_compute_time_pctg"]
        assert abs(parts - 100) < 0.05 or row["kernel_time_us"] == 0


def test_traces_cli_rejects_a_folder_without_traces(tmp_path):
    (tmp_path / "rank_0.log").write_text("hello\n")
    result = CliRunner().invoke(app, ["traces", str(tmp_path)])
    assert result.exit_code == 2


def test_analyze_includes_traces(tmp_path):
    incident = tmp_path / "incident"
    shutil.copytree(TRACES, incident)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["analyze", str(incident), "--out", str(out)])
    assert result.exit_code == 0, result.output
    postmortem = (out / "postmortem.md").read_text()
    assert "## Profiler traces" in postmortem
    assert (out / "figures" / "trace_breakdown.png").is_file()
    verdict = json.loads((out / "verdict.json").read_text())
    traces = [i for i in verdict["inputs"] if i["kind"] == "trace"]
    assert traces and all(i["status"] == "parsed" for i in traces)


def test_trace_straggler_becomes_the_verdict():
    from forensics.flow import analyze

    verdict = analyze(TRACES).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("STRAGGLER", [2])


def test_two_traces_claiming_one_rank_is_a_finding():
    from forensics.flow import analyze

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "edge" / "duplicate_rank"
    findings = analyze(folder).incident.findings
    conflicts = findings.filter(findings["pattern"] == "INPUT002")
    assert sorted(conflicts["file"].to_list()) == ["a.json", "b.json"]
