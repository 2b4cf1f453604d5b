"""Which GPU or kernel source a file is, from its first lines (discover.py asks)."""

from __future__ import annotations

import re

from forensics.ingest.gpu import ANSI
from forensics.ingest.smi_csv import _is_csv_header
from forensics.schema import InputKind

KERNEL_SNIFF_CHARS = 16_384
_DMON_HEAD = re.compile(r"^#\s*(?:gpu|Date|Time)\b", re.M)
_KERNEL_LINE = re.compile(r"^(?:\[\s*\d+\.\d{6}\] |\S+: kern: \w+: \[|.{15,40} kernel: )", re.M)
_KERNEL_WORDS = re.compile(r"NVRM: |SXid \(PCI:|AER: |[Oo]ut of memory: Kill|oom-kill:")


def sniff_gpu_kind(head: str) -> str | None:
    """The InputKind of a file from its first lines, when it is a GPU or kernel source."""
    text = re.sub(ANSI, "", head.lstrip("\ufeff"))
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if "==============NVSMI LOG==============" in text[:4096]:
        return InputKind.NVIDIA_SMI_QUERY.value
    if "<nvidia_smi_log>" in text[:4096]:
        return InputKind.NVIDIA_SMI_XML.value
    if _DMON_HEAD.match(first):
        return InputKind.NVIDIA_SMI_DMON.value
    if first.startswith("\t") and "GPU0" in first:
        return InputKind.NVIDIA_SMI_TOPO.value
    if _is_csv_header(first) or re.match(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}, ", first):
        return InputKind.NVIDIA_SMI_CSV.value
    start = text[:KERNEL_SNIFF_CHARS]  # a kernel log shows itself at once; 1,024 heads must stay cheap
    if _KERNEL_WORDS.search(start) or len(_KERNEL_LINE.findall(start)) >= 3:
        return InputKind.KERNEL_LOG.value
    return None
