"""The Five Whys follow the chain that was found, each why on a line that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forensics.flow import analyze

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "incidents"
CITED = re.compile(r"\((?:rank \d+, )?`([^`]+?)(?::(\d+))?`\)")  # (rank N, `file:line`), (`file`)
FAILED = sorted(
    p.name for p in FIXTURES.iterdir() if (p / "expected.json").exists() and "NO_FAILURE" not in (p / "expected.json").read_text()
)


def test_a_crash_with_cascade_reads_from_the_end_back_to_the_first_failure():
    whys = analyze(FIXTURES / "cuda_oom_8rank_cascade").verdict.whys
    assert whys[0].startswith("Why did the job end?") and "console.log:9" in whys[0]
    assert whys[1].startswith("Why did 4 other ranks fail?") and "watchdog" in whys[1] and whys[1].endswith("waiting for rank 5.")
    assert whys[2].startswith("Why did rank 5 fail? CUDA out of memory") and "`rank_5.log:66`" in whys[2]
    assert whys[3].startswith("Why did that happen? No line shows it")
    assert whys[-1].startswith("What would take the chain further:") and "memory_summary" in whys[-1]


def test_a_hang_asks_why_the_others_waited_for_the_culprit():
    whys = analyze(FIXTURES / "hang_nccl_8rank_one_silent").verdict.whys
    assert any(w.startswith("Why did they wait for rank 5?") for w in whys)
    assert not any("Why did rank 5 fail?" in w for w in whys)


@pytest.mark.parametrize("name", ["gpu_thermal_straggler", "straggler_midrun"])
def test_a_slow_run_asks_why_the_rank_was_slow_not_why_it_failed(name):
    whys = analyze(FIXTURES / name).verdict.whys
    assert re.match(r"Why was rank \d+ slow\? ", whys[0])
    assert not any(" fail?" in w or "wait for" in w for w in whys)


def test_the_xid_the_driver_logged_for_the_culprit_s_process_is_a_why_of_its_own():
    """Real H100 run: rank 3's kernel writes through a null pointer; dmesg has Xid 31 for its pid."""
    whys = analyze(FIXTURES / "gpu_gloo_4rank_illegal_access_rank3").verdict.whys
    failed = next(i for i, w in enumerate(whys) if w.startswith("Why did rank 3 fail?"))
    assert "illegal memory access" in whys[failed]
    assert whys[failed + 1] == "What did the GPU driver see? Xid 31: GPU memory page fault (rank 3, `dmesg.txt:1`)."


def test_a_device_assert_s_xid_43_is_cited_and_a_run_without_a_kernel_log_has_no_driver_why():
    assert any(
        w.startswith("What did the GPU driver see? Xid 43") and "rank 1," in w
        for w in analyze(FIXTURES / "gpu_gloo_4rank_device_assert_rank1").verdict.whys
    )
    assert not any("GPU driver" in w for w in analyze(FIXTURES / "gpu_gloo_4rank_cuda_oom_rank2").verdict.whys)


@pytest.mark.parametrize("name", FAILED)
def test_every_cited_line_of_the_chain_exists(name):
    incident = FIXTURES / name
    analysis = analyze(incident)
    expected = json.loads((incident / "expected.json").read_text())
    found = [why for why in analysis.verdict.whys if not why.startswith("What would")]  # the last one names commands
    cited = [(file, line) for why in found for file, line in CITED.findall(why)]
    if expected["category"] != "UNKNOWN":
        assert cited, f"{name}: no why names its evidence"
    for file, line in cited:
        assert (incident / file).is_file(), f"{name}: {file} is not an input"
        if line:
            lines = (incident / file).read_text(errors="replace").splitlines()
            assert 1 <= int(line) <= len(lines), f"{name}: {file}:{line} is past the end of the file"
