"""The SnapKV engine: policies score prompt positions, the cache keeps the best ones per layer and KV head.

The declarations of the settings (:mod:`.settings`) and the methods (:mod:`.methods`) load with the package: they are
free of torch, and the command line reads them for its options and help before any model loads. The rest (torch)
loads on first use.
"""

from __future__ import annotations

import importlib

from .methods import METHODS, Method
from .settings import CompressionSettings

_LAZY = {"LayerRecord": "records", "SnapKVCache": "cache", "SUPPORTED_FAMILIES": "families",
         "check_supported": "families", "attached": "hooks", "prepare": "hooks", "unprepare": "hooks",
         "POLICIES": "policies", "POLICY_NAMES": "policies"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "METHODS",
    "POLICIES",
    "POLICY_NAMES",
    "SUPPORTED_FAMILIES",
    "CompressionSettings",
    "LayerRecord",
    "Method",
    "SnapKVCache",
    "attached",
    "check_supported",
    "prepare",
    "unprepare",
]
