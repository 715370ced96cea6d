"""``snapkv bench speed``: prefill time, decode rate, KV bytes and peak memory per prompt length and configuration.

Configurations:

- ``weights-only``: plain transformers decoding from a one-token prompt (an empty cache): the floor no cache can
  beat, since every step still reads all the weights;
- ``transformers``: plain transformers as a user runs it: ``model.generate`` with transformers' own
  ``DynamicCache``, the model without any of this project's hooks (they are detached for the row, and the row
  checks that no forward hook at all is registered and that the cache and its layers are exactly transformers'
  classes, failing otherwise);
- ``full``: this project's cache without compression (preallocated ``BufferedLayer`` s, hooks attached);
- the compressing row: this project's cache compressing to each budget smaller than the prompt, with the method
  the plan names (a bench label, by default the command line's default method, :func:`~.grid.default_label`).

Everything runs in one process. One warm-up round runs every configuration once (discarded), then ``repeats``
rounds run every configuration again, interleaved: odd rounds in reverse order, so a drift over a round does not
favour the configurations that come first. Results are medians with interquartile ranges, and comparisons are
paired within a round (the compressing row against the plain-transformers row and against this project's full cache
of the same round: the first mixes the cache's own speed with compression's, the second is compression's alone)
before taking medians.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from transformers import cache_utils
from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

from ..engine import CompressionSettings, SnapKVCache
from ..engine.hooks import attached, detached, has_forward_hooks
from ..generation import GenerationOptions, generate_answer, synchronize
from ..generation.options import generation_default
from ..models.loader import LoadedModel
from .grid import BENCH_NEW_TOKENS, default_label, parse_label
from .haystack import haystack
from .memory import PeakRSS
from .spread import spread

DEFAULT_SPEED_LENGTHS = (1024, 2048, 4096, 8192)
DEFAULT_SPEED_BUDGETS = (256, 1024, 2048)
PLAIN_METHODS = ("weights-only", "transformers")
UNCOMPRESSED = (*PLAIN_METHODS, "full")
PLAIN_LAYER_CLASSES = (DynamicLayer, DynamicSlidingWindowLayer)


class NotPlainTransformers(RuntimeError):
    """A baseline row found this project's code (or any hook, or another cache) in the loop."""


@dataclass
class SpeedPlan:
    lengths: tuple[int, ...] = DEFAULT_SPEED_LENGTHS
    budgets: tuple[int, ...] = DEFAULT_SPEED_BUDGETS
    max_new_tokens: int = BENCH_NEW_TOKENS["speed"]
    repeats: int = 5
    warmup_rounds: int = 1
    window_size: int = 32
    kernel_size: int = 15
    pooling: str = "maxpool"
    chunk_size: int | None = None
    # the decoding steps' weights (--decode-weights) in the rows that run this project's cache
    decode_weights: str = generation_default("decode_weights")
    method: str = default_label()  # the compressing row's bench label

    def configurations(self) -> list[Configuration]:
        """weights-only first, then per length: transformers, full, and the method at every budget below the
        length."""
        configurations = [Configuration(1, "weights-only", None)]
        for length in self.lengths:
            configurations += [Configuration(length, "transformers", None), Configuration(length, "full", None)]
            configurations += [Configuration(length, self.method, budget) for budget in self.budgets if budget < length]
        return configurations


@dataclass(frozen=True)
class Configuration:
    length: int  # prompt tokens (1 for weights-only)
    method: str  # "weights-only", "transformers", "full" or the compressing method's bench label
    budget: int | None

    @property
    def key(self) -> tuple:
        return self.length, self.method, self.budget


@dataclass
class Sample:
    """One run of one configuration."""

    length: int
    method: str
    budget: int | None
    round: int  # 0, 1, ... for measured rounds; negative for warm-up rounds
    prefill_s: float
    selection_s: float  # of the prefill: window queries, scoring and gathering (0 for plain transformers)
    decode_s: float
    decode_steps: int  # forwards after the prefill
    decode_tokens_per_s: float
    kv_bytes: int  # the prompt's keys and values after the prefill (compressed where compressed)
    peak_rss_bytes: int  # highest RSS during this run
    peak_rss_above_start: int
    plain: bool = field(default=False)  # checked: no hooks, transformers' own DynamicCache and layers


def prose_ids(tokenizer, length: int) -> list[int]:
    """Exactly ``length`` token ids of prose."""
    ids: list[int] = []
    for paragraph in haystack(4000, seed=length):
        ids += tokenizer(paragraph + "\n\n", add_special_tokens=False)["input_ids"]
        if len(ids) >= length:
            return ids[:length]
    raise ValueError(f"not enough prose for {length} tokens")


def _prompt_kv_bytes(cache, decoded_tokens: int) -> int:
    """Bytes of the prompt's keys and values as stored after the prefill (decoded tokens left out)."""
    if isinstance(cache, SnapKVCache):
        return cache.summary()["bytes_after"]
    total = 0
    for layer in cache.layers:
        tokens = layer.keys.shape[2]
        total += 2 * layer.keys.numel() * layer.keys.element_size() * (tokens - decoded_tokens) // tokens
    return total


class _StepClock:
    """A logits processor that notes the time after each forward (synchronized): the first is the prefill's end."""

    def __init__(self, device: torch.device):
        self.device = device
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        synchronize(self.device)
        self.times.append(time.perf_counter())
        return scores


def check_plain(model, cache) -> None:
    """Raise :class:`NotPlainTransformers` unless ``model`` has no forward hook and ``cache`` is exactly a
    transformers ``DynamicCache`` whose layers are exactly transformers' own layer classes."""
    hooked = has_forward_hooks(model)
    if hooked:
        raise NotPlainTransformers(f"the plain-transformers row found forward hooks on {', '.join(hooked[:5])}")
    if type(cache) is not cache_utils.DynamicCache:
        raise NotPlainTransformers(f"the plain-transformers row got a {type(cache).__name__}, not a DynamicCache")
    foreign = {type(layer).__name__ for layer in cache.layers if type(layer) not in PLAIN_LAYER_CLASSES}
    if foreign:
        raise NotPlainTransformers(f"the plain-transformers row's cache holds {', '.join(sorted(foreign))} layers")


def plain_transformers_run(model, ids: list[int], new_tokens: int) -> tuple[float, float, int, DynamicCache]:
    """Greedy ``model.generate`` of exactly ``new_tokens`` tokens with a fresh ``DynamicCache``, hooks detached.

    Returns (prefill seconds, decode seconds, decode forwards, the cache). :func:`check_plain` runs before and after.
    """
    from transformers import GenerationConfig, LogitsProcessorList

    device = model.device
    cache = DynamicCache(config=model.config)
    clock = _StepClock(device)
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              eos_token_id=model.generation_config.eos_token_id,
                              pad_token_id=model.generation_config.pad_token_id or 0)
    inputs = torch.tensor([ids], device=device)
    with detached(model):
        check_plain(model, cache)
        with torch.inference_mode():
            synchronize(device)
            started = time.perf_counter()
            with warnings.catch_warnings():  # transformers >= 5.2x renames the argument ``cache``; both work
                warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated", category=FutureWarning)
                model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=config,
                               past_key_values=cache, logits_processor=LogitsProcessorList([clock]))
        check_plain(model, cache)
    prefill_s = clock.times[0] - started
    return prefill_s, clock.times[-1] - clock.times[0], len(clock.times) - 1, cache


def _measure(loaded: LoadedModel, ids: list[int], plan: SpeedPlan, configuration: Configuration,
             round_index: int) -> Sample:
    model, tokenizer = loaded.model, loaded.tokenizer
    gc.collect()
    if configuration.method in PLAIN_METHODS:
        with PeakRSS() as peak:
            prefill_s, decode_s, steps, cache = plain_transformers_run(model, ids, plan.max_new_tokens)
            kv_bytes = _prompt_kv_bytes(cache, steps) if len(ids) > 1 else 0
        del cache
        selection_s, plain = 0.0, True
    else:
        method, overrides = parse_label(configuration.method)
        settings = CompressionSettings(method=method, window_size=plan.window_size,
                                       max_capacity_prompt=configuration.budget or plan.window_size + 1,
                                       kernel_size=plan.kernel_size, pooling=plan.pooling, **overrides)
        with attached(model), PeakRSS() as peak:
            result = generate_answer(model, tokenizer, ids, settings, GenerationOptions(
                max_new_tokens=plan.max_new_tokens, stop_at_eos=False, prefill_chunk=plan.chunk_size,
                decode_weights=plan.decode_weights))
            kv_bytes = _prompt_kv_bytes(result.cache, result.decode_steps)
        prefill_s, decode_s, steps = result.prefill_s, result.decode_s, result.decode_steps
        selection_s, plain = result.cache.selection_seconds, False
        del result
    return Sample(configuration.length, configuration.method, configuration.budget, round_index,
                  round(prefill_s, 4), round(selection_s, 4), round(decode_s, 4), steps,
                  round(steps / decode_s, 3) if decode_s > 0 else 0.0, kv_bytes, peak.bytes, peak.above_start, plain)


def round_order(configurations: list[Configuration], round_index: int) -> list[Configuration]:
    """Every configuration once: in order for even rounds, reversed for odd ones (the warm-up round, -1, is odd)."""
    return list(configurations) if round_index % 2 == 0 else list(reversed(configurations))


def run_speed(loaded: LoadedModel, plan: SpeedPlan, on_sample: Callable[[Sample], None] | None = None) -> list[Sample]:
    """Warm-up rounds (negative ``round``), then ``plan.repeats`` measured rounds of every configuration."""
    configurations = plan.configurations()
    bos = loaded.tokenizer.bos_token_id
    prompts = {1: [bos if bos is not None else 0]}
    prompts.update({length: prose_ids(loaded.tokenizer, length) for length in plan.lengths})
    samples: list[Sample] = []
    for round_index in range(-plan.warmup_rounds, plan.repeats):
        for configuration in round_order(configurations, round_index):
            sample = _measure(loaded, prompts[configuration.length], plan, configuration, round_index)
            samples.append(sample)
            if on_sample is not None:
                on_sample(sample)
    return samples


# -- summaries: recomputed from the samples alone (tools/docs/tables.py checks the committed JSON this way) ----------

def _measured(samples: list[dict]) -> list[dict]:
    return [sample for sample in samples if sample["round"] >= 0]


def summarize(samples: list[dict]) -> list[dict]:
    """Per configuration: median and quartiles of prefill, selection, decode rate and peak RSS over the rounds."""
    groups: dict[tuple, list[dict]] = {}
    for sample in _measured(samples):
        groups.setdefault((sample["length"], sample["method"], sample["budget"]), []).append(sample)
    rows = []
    for (length, method, budget), group in groups.items():
        rows.append({"length": length, "method": method, "budget": budget, "repeats": len(group),
                     "prefill_s": spread([s["prefill_s"] for s in group]),
                     "selection_s": spread([s["selection_s"] for s in group]),
                     "decode_tokens_per_s": spread([s["decode_tokens_per_s"] for s in group], 3),
                     "kv_bytes": spread([s["kv_bytes"] for s in group], 0)["median"],
                     "peak_rss_bytes": spread([s["peak_rss_bytes"] for s in group], 0),
                     "plain": all(s["plain"] for s in group)})
    return rows


def compare(samples: list[dict]) -> list[dict]:
    """Per length and project row (full, the compressing method per budget), ratios paired within each round, then
    spread.

    prefill_overhead_vs_transformers = prefill / plain prefill - 1; decode_vs_transformers = rate / plain rate (this
    project's cache and compression together); prefill_overhead_vs_full and decode_vs_full (compressing rows only:
    compression's own cost and gain against this project's uncompressed cache); decode_vs_weights_only = rate /
    weights-only rate. Also per length the plain row's own decode_vs_weights_only: how far any cache could raise the
    rate at that length.
    """
    by_round: dict[tuple, dict] = {}
    for sample in _measured(samples):
        by_round[(sample["round"], sample["length"], sample["method"], sample["budget"])] = sample
    rounds = sorted({key[0] for key in by_round})
    rows = []
    keys = sorted({key[1:] for key in by_round if key[2] not in ("weights-only",)},
                  key=lambda k: (k[0], UNCOMPRESSED.index(k[1]) if k[1] in UNCOMPRESSED else len(UNCOMPRESSED),
                                 k[2] or 0))
    for length, method, budget in keys:
        ratios: dict[str, list[float]] = {"prefill_overhead_vs_transformers": [], "prefill_overhead_vs_full": [],
                                          "decode_vs_transformers": [], "decode_vs_full": [],
                                          "decode_vs_weights_only": []}
        for r in rounds:
            row = by_round.get((r, length, method, budget))
            plain = by_round.get((r, length, "transformers", None))
            full = by_round.get((r, length, "full", None))
            floor = by_round.get((r, 1, "weights-only", None))
            if row is None:
                continue
            if plain is not None and method != "transformers":
                ratios["prefill_overhead_vs_transformers"].append(row["prefill_s"] / plain["prefill_s"] - 1)
                ratios["decode_vs_transformers"].append(row["decode_tokens_per_s"] / plain["decode_tokens_per_s"])
            if full is not None and method not in UNCOMPRESSED:
                ratios["prefill_overhead_vs_full"].append(row["prefill_s"] / full["prefill_s"] - 1)
                ratios["decode_vs_full"].append(row["decode_tokens_per_s"] / full["decode_tokens_per_s"])
            if floor is not None:
                ratios["decode_vs_weights_only"].append(row["decode_tokens_per_s"] / floor["decode_tokens_per_s"])
        rows.append({"length": length, "method": method, "budget": budget,
                     **{name: spread(values) if values else None for name, values in ratios.items()}})
    return rows


def to_json(plan: SpeedPlan, samples: list[Sample], provenance: dict) -> dict:
    raw = [asdict(sample) for sample in samples]
    return {"schema_version": 2, "kind": "speed", "plan": asdict(plan), "provenance": provenance,
            "summary": summarize(raw), "comparisons": compare(raw), "samples": raw}
