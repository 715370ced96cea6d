"""Generation: prefill with a compressing cache (whole or in chunks, a shared prefix once), then decode from the
compressed cache, timing both (:mod:`.generate`); how to prefill and decode, declared once (:mod:`.options`); the
decoding steps on bfloat16 copies of a float32 model's weights (:mod:`.decode_path`); where an answer ends
(:mod:`.stopping`); the streamed text in whole characters (:mod:`.streaming`); free heap pages handed
back to the OS after a compressing prefill (:mod:`.allocator`).

The options' declaration loads with the package: it is free of torch, and the command line reads it for its options
and help before any model loads. The rest (torch) loads on first use.
"""

from __future__ import annotations

import importlib

from .options import GenerationOptions

_LAZY = {name: "generate" for name in ("GenerationResult", "build_prefix", "generate_answer", "prefill",
                                       "stop_token_ids", "synchronize")}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GenerationOptions", "GenerationResult", "build_prefix", "generate_answer", "prefill", "stop_token_ids",
           "synchronize"]
