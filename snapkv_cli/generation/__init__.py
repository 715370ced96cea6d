"""Generation: prefill with a compressing cache (whole or in chunks, a shared prefix once), then decode from the
compressed cache, timing both (:mod:`.generate`); where an answer ends (:mod:`.stopping`); the streamed text in whole
characters (:mod:`.streaming`); free heap pages handed back to the OS after a compressing prefill (:mod:`.allocator`).
"""

from .generate import (
    GenerationOptions,
    GenerationResult,
    build_prefix,
    generate_answer,
    prefill,
    stop_token_ids,
    synchronize,
)

__all__ = ["GenerationOptions", "GenerationResult", "build_prefix", "generate_answer", "prefill", "stop_token_ids",
           "synchronize"]
