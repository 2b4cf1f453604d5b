"""Flight Recorder dumps: pickle and JSON read into frames; hostile pickles refused, never run."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import polars as pl
import pytest

from forensics.ingest.flight_recorder import (
    entries_frame,
    load_flight_recorder,
    read_dump,
    sniff_flight_recorder,
)
from forensics.safe_pickle import load_plain
from tests.conftest import load_generator

ROOT = Path(__file__).resolve().parents[1]
FR_FIXTURE = ROOT / "fixtures" / "incidents" / "hang_flight_recorder"


GEN = load_generator("make_hang_incidents")


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _Exec:
    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


def _hostile_payloads(marker: Path) -> dict[str, bytes]:
    touch = f"open({str(marker)!r}, 'w').write('ran')"
    return {
        "reduce_os_system": pickle.dumps({"entries": _System(f"touch {marker}")}, protocol=2),
        "reduce_exec_protocol5": pickle.dumps({"entries": [_Exec(touch)]}, protocol=5),
        # Protocol 0 INST opcode: `i` module \n name \n after a MARK, no REDUCE needed.
        "inst_opcode": b"(S" + repr(touch).encode() + b"\nibuiltins\nexec\n.",
        "global_then_build": b"\x80\x02cos\nsystem\n)\x81}b.",
    }


@pytest.mark.parametrize("name", ["reduce_os_system", "reduce_exec_protocol5", "inst_opcode", "global_then_build"])
def test_hostile_pickles_are_refused_and_never_run(tmp_path, name):
    marker = tmp_path / "PWNED"
    data, problem = load_plain(_hostile_payloads(marker)[name])
    assert data is None
    assert problem and problem.startswith("unsafe pickle: refused to import")
    assert not marker.exists()


def test_planted_dump_in_the_fixture_is_refused_and_reported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # its payload is `touch FORENSICS_PICKLE_RAN` relative to the cwd
    result = load_flight_recorder(FR_FIXTURE, ["untrusted/nccl_trace_rank_0"])
    assert not (tmp_path / "FORENSICS_PICKLE_RAN").exists()
    (status,) = result.statuses
    assert status.status == "skipped"
    assert "refused to import" in status.problem and "system" in status.problem
    assert result.tables["fr_entries"].is_empty()


def test_plain_data_pickles_load():
    value = {"a": [1, 2.5, None, True], "b": ("0", "default_pg"), "c": b"raw", "d": {3, 4}}
    assert load_plain(pickle.dumps(value, protocol=4)) == (value, None)


def test_torchscript_type_tags_load_without_torch():
    # What torch.jit's pickler writes for a typed dict: restore_type_tag({...}, "Dict[str, int]").
    data = b"\x80\x02ctorch.jit._pickle\nrestore_type_tag\n}(X\x01\x00\x00\x00kK\x01uX\x0e\x00\x00\x00Dict[str, int]\x86R."
    assert load_plain(data) == ({"k": 1}, None)


@pytest.mark.parametrize(
    "data, why",
    [(b"\x80\x02}q\x00(X\x07\x00\x00\x00entries", "malformed"), (b"", "malformed"), (b"\x80\x02" + b"(" * 10, "malformed")],
)
def test_truncated_or_garbage_pickles_degrade(data, why):
    value, problem = load_plain(data)
    assert value is None and problem.startswith(why)


def test_size_limit():
    value, problem = load_plain(pickle.dumps(list(range(1000))), max_bytes=100)
    assert value is None and "limit" in problem


def test_fixture_dumps_read_into_frame():
    result = load_flight_recorder(FR_FIXTURE, [f"nccl_trace_rank_{r}" for r in range(4)])
    entries = result.tables["fr_entries"]
    assert [s.status for s in result.statuses] == ["parsed"] * 4
    assert sorted(entries["rank"].unique().to_list()) == [0, 1, 2, 3]
    last = entries.group_by("rank").agg(pl.col("collective_seq_id").max().alias("last")).sort("rank")
    assert last["last"].to_list() == [25, 25, 25, 24]
    row = entries.filter((entries["rank"] == 0) & (entries["collective_seq_id"] == 25)).row(0, named=True)
    assert row["op"] == "nccl:all_reduce" and row["state"] == "scheduled"
    assert row["input_sizes"] == "[[4096, 1024]]" and row["input_dtypes"] == "[BFloat16]"
    assert (row["pg_name"], row["pg_desc"]) == ("0", "default_pg")
    assert row["stack"] == "all_reduce at /usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py:3174"
    status = result.tables["fr_pg_status"]
    assert status.filter(status["rank"] == 3)["last_completed"].to_list() == [24]
    assert status["pg_ranks"].unique().to_list() == ["[0, 1, 2, 3]"]


def test_json_dump_and_compressed_dump(tmp_path):
    dump = GEN.fr_dump(rank=1, world=2, last_seq=9, first_seq=5, pending=9)
    as_json = json.loads(json.dumps(dump))  # process_group becomes a 2-list, as in _dump_nccl_trace_json
    (tmp_path / "trace_1").write_text(json.dumps(as_json))
    (tmp_path / "trace_0").write_bytes(gzip.compress(pickle.dumps(GEN.fr_dump(0, 2, 9, 5, 9))))
    result = load_flight_recorder(tmp_path, ["trace_0", "trace_1"])
    entries = result.tables["fr_entries"]
    assert entries.height == 10
    assert entries.filter(entries["rank"] == 1)["pg_desc"].unique().to_list() == ["default_pg"]
    assert entries.filter(entries["collective_seq_id"] == 9)["state"].to_list() == ["scheduled", "scheduled"]


def test_odd_entries_keep_their_well_typed_fields(tmp_path):
    dump = GEN.fr_dump(0, 1, 3, 1, None)
    dump["entries"][1]["input_sizes"] = "not a list"
    dump["entries"][2] = "not an entry"
    frame = entries_frame(dump, "trace_0", 0)
    assert frame["collective_seq_id"].to_list() == [1, 2]
    assert frame["input_sizes"].to_list() == ["[[4096, 1024]]", None]


def test_not_a_dump(tmp_path):
    (tmp_path / "trace_0").write_bytes(pickle.dumps([1, 2, 3]))
    (tmp_path / "trace_1").write_text("{not json")
    assert read_dump(tmp_path / "trace_0") == (None, "not a Flight Recorder dump (no entries list)")
    assert read_dump(tmp_path / "trace_1")[1].startswith("malformed JSON dump")


def test_sniff():
    pickled = pickle.dumps(GEN.fr_dump(0, 1, 2, 1, None), protocol=2)
    assert sniff_flight_recorder("nccl_trace_rank_0", pickled[:4096])
    assert sniff_flight_recorder("trace_0", json.dumps({"version": "2.5", "pg_config": {}}).encode())
    assert not sniff_flight_recorder("trace.json", b'{"traceEvents": []}')
    assert not sniff_flight_recorder("x", pickle.dumps({"weights": [1.0]}, protocol=2))
    assert not sniff_flight_recorder("x", b"")
