"""snapkv-cli: ask questions of long documents with a local LLM whose KV cache is compressed by SnapKV."""

from __future__ import annotations

__version__ = "0.1.0"

_ENGINE_EXPORTS = ("SnapKVCache", "CompressionSettings", "prepare", "attached", "unprepare", "POLICY_NAMES")


def __getattr__(name: str):
    # torch and transformers load only when the engine is asked for, so `snapkv --help` stays fast
    if name in _ENGINE_EXPORTS:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'snapkv_cli' has no attribute {name!r}")


__all__ = ["__version__", *_ENGINE_EXPORTS]
