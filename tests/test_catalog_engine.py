"""The catalog engine: loading checks shape, matching is two-stage, validation catches bad patterns."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from forensics.catalog.load import CatalogError, load_catalog, load_pattern
from forensics.catalog.match import match_catalog, prefilter
from forensics.catalog.validate import validate_catalog
from tests.conftest import lines_frame

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity of 83.05 GiB "
    "of which 140.38 MiB is free."
)
GOOD = """id = "TST001"
name = "cuda-oom"
title = "CUDA out of memory"
category = "CUDA_OOM"
severity = "critical"
role = "initiating"
literals = ["CUDA out of memory"]
regex = \'\'\'CUDA out of memory\\. Tried to allocate (?P<requested>[\\d.]+ \\w+)\'\'\'
meaning = "GPU memory ran out."
immediate = ["Lower the batch size"]
structural = ["Measure peak memory before launch"]

[examples]
match = ["{oom}"]
no_match = ["CUDA out of memory is a phrase in our docs"]
""".replace("{oom}", OOM)


def write_pattern(directory: Path, text: str, family: str = "cuda", filename: str = "TST001-cuda-oom.toml") -> Path:
    path = directory / family / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_good_pattern_loads_and_validates(tmp_path):
    write_pattern(tmp_path, GOOD)
    (pattern,) = load_catalog(tmp_path)
    assert (pattern.id, pattern.family, pattern.literals) == ("TST001", "cuda", ("CUDA out of memory",))
    assert validate_catalog([pattern]) == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('meaning = "GPU memory ran out."\n', ""), "missing meaning"),
        (lambda t: t.replace('"CUDA_OOM"', '"GPU_SAD"'), "unknown category"),
        (lambda t: t.replace('role = "initiating"', 'role = "villain"'), "unknown role"),
        (lambda t: t.replace('severity = "critical"', 'severity = "meh"'), "unknown severity"),
        (lambda t: t.replace('literals = ["CUDA out of memory"]', 'literals = "CUDA out of memory"'), "must be a list"),
        (lambda t: t + "\n[[[", "not valid TOML"),
    ],
)
def test_malformed_pattern_is_a_catalog_error(tmp_path, edit, message):
    path = write_pattern(tmp_path, edit(GOOD))
    with pytest.raises(CatalogError, match=message):
        load_pattern(path)


def test_duplicate_ids_are_an_error(tmp_path):
    write_pattern(tmp_path, GOOD)
    write_pattern(tmp_path, GOOD.replace('name = "cuda-oom"', 'name = "again"'), family="other", filename="TST001-again.toml")
    with pytest.raises(CatalogError, match="duplicate pattern id TST001"):
        load_catalog(tmp_path)


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda t: t.replace('literals = ["CUDA out of memory"]', 'literals = ["CUDA"]'), "shorter than"),
        (lambda t: t.replace('literals = ["CUDA out of memory"]', "literals = []"), "at least one literal"),
        (lambda t: t.replace("Tried to allocate", "Tried to (?=allocate)"), "does not compile"),
        (
            lambda t: t.replace('no_match = ["CUDA out of memory is a phrase in our docs"]', f'no_match = ["{OOM}"]'),
            "no_match example matches",
        ),
        (
            lambda t: t.replace(f'match = ["{OOM}"]', 'match = ["CUDA out of memory. Tried to allocate lots"]'),
            "match example does not match",
        ),
        (lambda t: t.replace('literals = ["CUDA out of memory"]', 'literals = ["HIP out of memory"]'), "no literal occurs"),
        (lambda t: t.replace('structural = ["Measure peak memory before launch"]\n', ""), "immediate and structural"),
    ],
)
def test_validation_flags_bad_patterns(tmp_path, edit, problem):
    write_pattern(tmp_path, edit(GOOD))
    problems = [str(p) for p in validate_catalog(load_catalog(tmp_path))]
    assert any(problem in p for p in problems), problems


def test_file_name_must_match_id_and_name(tmp_path):
    write_pattern(tmp_path, GOOD, filename="TST001-wrong.toml")
    problems = [str(p) for p in validate_catalog(load_catalog(tmp_path))]
    assert any("file name should be TST001-cuda-oom.toml" in p for p in problems)


def test_matching_is_two_stage_and_cites_lines(tmp_path):
    write_pattern(tmp_path, GOOD)
    patterns = load_catalog(tmp_path)
    lines = lines_frame(["step 1 | loss 3.5", f"[default0]:[rank0]: {OOM}", "CUDA out of memory (mentioned)", "done"])
    assert prefilter(lines, patterns)["line"].to_list() == [2, 3]  # stage 1: literals only
    findings = match_catalog(lines, patterns)
    (hit,) = findings.iter_rows(named=True)  # stage 2: the regex
    assert (hit["pattern"], hit["file"], hit["line"], hit["rank"]) == ("TST001", "rank_0.log", 2, 0)
    assert (hit["category"], hit["role"], hit["severity"]) == ("CUDA_OOM", "initiating", "critical")
    assert json.loads(hit["captures"]) == {"requested": "768.00 MiB"}


def test_literals_are_matched_literally(tmp_path):
    # A literal with regex metacharacters must not act as a regex in the prefilter.
    text = GOOD.replace('literals = ["CUDA out of memory"]', 'literals = ["CUDA out of memory. Tried"]')
    write_pattern(tmp_path, text)
    patterns = load_catalog(tmp_path)
    assert prefilter(lines_frame(["CUDA out of memoryX Tried"]), patterns).is_empty()


def test_no_lines_or_no_patterns_give_no_findings(tmp_path):
    write_pattern(tmp_path, GOOD)
    patterns = load_catalog(tmp_path)
    assert match_catalog(lines_frame([]), patterns).is_empty()
    assert match_catalog(lines_frame([OOM]), []).is_empty()


def test_the_shipped_catalog_is_valid():
    patterns = load_catalog()
    assert len(patterns) >= 10
    assert validate_catalog(patterns) == []
    assert all(isinstance(p.regex, str) and p.literals for p in patterns)
    assert pl.Series([p.id for p in patterns]).is_unique().all()


def test_a_launcher_line_naming_a_rank_gives_its_finding_that_rank():
    """mpirun names the rank it saw die; the line itself carries no rank prefix."""
    text = "mpirun noticed that process rank 7 with PID 0 on node gpu-node-3 exited on signal 9 (Killed)."
    found = match_catalog(lines_frame([text], rank=None), load_catalog())
    assert found.filter(pl.col("pattern") == "GEN004")["rank"].to_list() == [7]


def test_a_generic_family_speaks_only_where_no_specific_pattern_does():
    """`CUDA error: an illegal memory access` is CUDA001's; `CUDA error: operation not supported` is only the family's."""
    catalog = load_catalog()
    texts = [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: CUDA error: operation not supported",
    ]
    found = match_catalog(lines_frame(texts), catalog)
    by_line = {line: sorted(group["pattern"].to_list()) for (line,), group in found.group_by("line")}
    assert by_line == {1: ["CUDA001"], 2: ["GEN001"]}


def test_tensorflow_s_oom_is_device_memory_unless_its_line_names_the_cpu_allocator():
    """tensorflow/nmt#119 (no device on the line) is the GPU's; the CPU allocator's wording (a Keras OCR run) is host memory."""
    texts = [
        "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[1664,279617]",
        "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[307328,3817] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu",
    ]
    found = match_catalog(lines_frame(texts), load_catalog())
    assert found.select("line", "pattern").rows() == [(1, "GEN002"), (2, "HOST007")]


def test_a_teardown_note_on_the_same_line_does_not_silence_a_failure_family():
    """lm-sys/FastChat#390, transcribed from a screenshot: the OOM and torchrun's SIGTERM run together on one line."""
    line = (
        "JutofMemoryError: CUDA out of memory. Tried t allocate 388.00 MiB (GPV 0; 39.43 GiB total capacity; 37.42 GiB "
        "already allocated; 126.25 MiBfree; 3764 GiB reserved in total by Pyorch) If reserved memory is >> allocated me"
        "mory try setting max split size mb to avoid framentationSee documentation for Memory Management and PYTORCH CU"
        "DA ALLOC CONFwandb: Waiting for W&B process to finish...(failed 1). Press Control-C to abort syncing.WARNING:t"
        "orch.distributed.elastic.multiprocessing.api:Sending process 22093 closing signal SIGTERMERROR:torch.distribut"
        "ed.elastic.multiprocessing.api:failed exitcode: 1) local rank: 1 pid: 22094) of binary: /usr/bin/python3"
    )
    found = match_catalog(lines_frame([line]), load_catalog())
    assert dict(found.select("pattern", "role").rows()) == {"GEN002": "initiating", "TRUN011": "teardown"}


def test_the_watchdog_wrapping_an_unknown_cuda_error_is_classified_by_what_it_wraps(tmp_path):
    """A wrapper is not a cause: the watchdog line carries a CUDA error no specific pattern knows."""
    from forensics.flow import analyze
    from tests.conftest import write_files

    line = "[rank3]:[E1124 10:00:00.000000000 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure"
    verdict = analyze(write_files(tmp_path, {"console.log": line + "\n"})).verdict
    assert (verdict.category, verdict.culprit_ranks) == ("CUDA_ERROR", [3])
    assert "timeout" not in verdict.summary.lower()


def test_an_error_its_handler_ignored_is_an_event_and_the_same_error_unhandled_is_not():
    # An open_clip run pasted in SuperClass#11: webdataset's warn_and_continue handler.
    handled = [
        "2024-11-28,04:40:24 | WARNING | Handling webdataset error (OSError('image file is truncated (12 bytes not processed)')). Ignoring.",
        "2024-11-28,04:46:47 | WARNING | Handling webdataset error (OSError('image file is truncated (22 bytes not processed)')). Ignoring.",
    ]
    raised = ["OSError: image file is truncated (5 bytes not processed)"]
    found = match_catalog(lines_frame(handled + raised), load_catalog()).filter(pl.col("pattern") == "DATA013")
    assert found.select("line", "role", "severity").rows() == [(1, "event", "info"), (2, "event", "info"), (3, "initiating", "error")]
