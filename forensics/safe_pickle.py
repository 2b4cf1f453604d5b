"""Load a pickle that may be hostile, building only plain data and never running code.

A pickle is a program for a small stack machine; its GLOBAL/STACK_GLOBAL/INST opcodes
import any callable and REDUCE/NEWOBJ/BUILD call it, which is how a "dump" runs
`os.system`. Every way to get a callable onto that stack goes through
`Unpickler.find_class` (or `persistent_load`), so refusing there leaves only dicts, lists,
tuples, sets, str, bytes, int, float, bool and None to be built.

One narrow exception: PyTorch's TorchScript pickler (which writes Flight Recorder dumps)
wraps typed containers in `torch.jit._pickle.restore_type_tag(value, "Dict[str, Any]")`
and may write int/float/bool lists via `build_intlist` & co. Those names resolve to the
local pure functions below, never to torch, so a real dump loads without torch installed
and nothing else can be named.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

MAX_PICKLE_BYTES = 128 << 20  # a 2,000-entry FR ring with stacks is a few MB; 20,000 about 40
# Every byte of a pickle can build an object: `}` is a new empty dict (64 bytes), so a 20 MB
# file of them is 1.3 GB. Each opcode byte that makes a container (or opens one with MARK)
# is counted, wherever it sits (string bytes count too: an overestimate, never an under-),
# and a pickle whose containers alone would exceed MAX_CONTAINER_BYTES is not loaded.
CONTAINER_OPCODES = (b"}", b"]", b")", b"(", b"\x85", b"\x86", b"\x87", b"\x8f")
CONTAINER_BYTES = 72  # an empty dict, the largest of them
MAX_CONTAINER_BYTES = 1 << 30


class RefusedPickle(pickle.UnpicklingError):
    """The pickle asked for something other than plain data."""


def _restore_type_tag(value: Any, _type_name: str) -> Any:
    return value


def _as_list(values: Any) -> list:
    if not isinstance(values, list):
        raise RefusedPickle("typed-list helper applied to a non-list")
    return values


_TORCHSCRIPT_HELPERS = {
    ("torch.jit._pickle", "restore_type_tag"): _restore_type_tag,
    ("torch.jit._pickle", "build_intlist"): _as_list,
    ("torch.jit._pickle", "build_floatlist"): _as_list,
    ("torch.jit._pickle", "build_boollist"): _as_list,
    ("torch.jit._pickle", "build_doublelist"): _as_list,
}


class _DataOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        helper = _TORCHSCRIPT_HELPERS.get((module, name))
        if helper is None:
            raise RefusedPickle(f"refused to import {module}.{name}")
        return helper

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("refused a persistent id reference")


def load_plain(data: bytes, max_bytes: int = MAX_PICKLE_BYTES) -> tuple[Any | None, str | None]:
    """(object, None) for a plain-data pickle; (None, why) for anything else. Never raises."""
    if len(data) > max_bytes:
        return None, f"pickle is {len(data)} bytes, over the {max_bytes}-byte limit"
    containers = sum(data.count(opcode) for opcode in CONTAINER_OPCODES)
    if containers * CONTAINER_BYTES > MAX_CONTAINER_BYTES:
        return None, f"pickle could build {containers:,} containers, over the {MAX_CONTAINER_BYTES >> 20} MiB memory bound"
    try:
        return _DataOnlyUnpickler(io.BytesIO(data)).load(), None
    except RefusedPickle as exc:
        return None, f"unsafe pickle: {exc}"
    except RecursionError:
        return None, "malformed pickle: nesting too deep"
    except MemoryError:
        return None, "malformed pickle: would exhaust memory"
    except Exception as exc:  # noqa: BLE001 -- truncated or corrupt input takes many shapes
        return None, f"malformed pickle: {type(exc).__name__}: {exc}"
