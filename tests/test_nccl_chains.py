"""An NCCL error-return chain is the failure its thread's WARN line names (NVIDIA/nccl#1529's lines)."""

from __future__ import annotations

from forensics.flow import analyze

WARN = "ucpe-resource033018034100:6897:7102 [2] misc/nvmlwrap.cc:187 NCCL WARN nvmlDeviceGetHandleByPciBusId() failed: Not Found"
CHAIN = [
    "ucpe-resource033018034100:6897:7102 [2] NCCL INFO graph/xml.cc:850 -> 2",
    "ucpe-resource033018034100:6897:7102 [2] NCCL INFO graph/topo.cc:696 -> 2",
    "ucpe-resource033018034100:6897:7102 [2] NCCL INFO init.cc:1012 -> 2",
    "ucpe-resource033018034100:6897:7102 [2] NCCL INFO init.cc:1548 -> 2",
    "ucpe-resource033018034100:6897:7102 [2] NCCL INFO group.cc:64 -> 2 [Async thread]",
]


def _chain_categories(tmp_path, lines):
    (tmp_path / "console.log").write_text("\n".join(lines) + "\n")
    analysis = analyze(tmp_path)
    chain = analysis.incident.findings.filter(analysis.incident.findings["pattern"] == "NCCL020")
    return analysis.verdict.category, set(chain["category"].to_list())


def test_a_chain_after_its_thread_s_warn_is_that_failure(tmp_path):
    category, chain = _chain_categories(tmp_path, [WARN, *CHAIN])
    assert (category, chain) == ("ENVIRONMENT", {"ENVIRONMENT"})


def test_a_chain_whose_warn_is_not_in_the_excerpt_keeps_the_code_s_reading(tmp_path):
    category, chain = _chain_categories(tmp_path, CHAIN)
    assert (category, chain) == ("NETWORK", {"NETWORK"})


def test_a_warn_of_another_thread_does_not_explain_the_chain(tmp_path):
    other = WARN.replace(":6897:7102 ", ":6898:7110 ")
    _, chain = _chain_categories(tmp_path, [other, *CHAIN])
    assert chain == {"NETWORK"}
