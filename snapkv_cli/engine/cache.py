"""``SnapKVCache``: a transformers ``DynamicCache`` that compresses each layer's prompt KV at the end of the prefill.

Decoding then appends to the compressed layers as usual. The attention modules must be prepared once with
:func:`snapkv_cli.engine.hooks.prepare` so the cache can recompute the observation window's queries from each
layer's hidden states (this works under any attention implementation: eager, sdpa, flash).
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, DynamicLayer

from ..errors import UnsupportedAttention
from .attention import attention_probabilities
from .families import attention_scaling, is_sliding_layer, logit_softcap, output_projection, project_queries
from .layers import BufferedLayer
from .masking import MASKABLE_ATTENTION, CompressedLayerMask
from .policies import POLICIES, LayerContext
from .selection import gather_positions
from .settings import CompressionSettings


@dataclass
class ChunkQueries:
    """One prefill chunk's inputs to a layer's attention, from which any of its queries can be recomputed.

    hidden_states: (batch, tokens, hidden); cos, sin: (batch, tokens, rotary_dim); start: position of token 0.
    """

    module: nn.Module
    hidden_states: torch.Tensor
    cos: torch.Tensor
    sin: torch.Tensor
    start: int

    @property
    def length(self) -> int:
        return self.hidden_states.shape[1]

    def queries(self, first: int, last: int) -> torch.Tensor:
        """(batch, query_heads, last - first, head_dim) rotated queries of chunk tokens [first, last)."""
        return project_queries(
            self.module, self.hidden_states[:, first:last], self.cos[:, first:last], self.sin[:, first:last]
        )

    def positions(self, first: int, last: int) -> torch.Tensor:
        return torch.arange(self.start + first, self.start + last, device=self.hidden_states.device)


@dataclass
class PendingLayer:
    """What a layer gathers over the prefill chunks before it is compressed."""

    window_queries: torch.Tensor | None = None  # (batch, query_heads, <= window, head_dim)
    window_positions: torch.Tensor | None = None  # (<= window,)
    accumulated_attention: torch.Tensor | None = None  # (batch, kv_heads, group, keys so far)

    def absorb(self, chunk: ChunkQueries, keys: torch.Tensor, settings: CompressionSettings, accumulate: bool) -> None:
        """Keep the latest ``window_size`` queries; optionally add this chunk's attention column sums.

        keys: (batch, kv_heads, keys so far, head_dim), this chunk's included.
        """
        window = settings.window_size
        first = max(0, chunk.length - window)
        queries, positions = chunk.queries(first, chunk.length), chunk.positions(first, chunk.length)
        if self.window_queries is not None:
            queries = torch.cat([self.window_queries, queries], dim=2)[:, :, -window:]
            positions = torch.cat([self.window_positions, positions])[-window:]
        self.window_queries, self.window_positions = queries, positions
        if accumulate:
            self._accumulate(chunk, keys, settings.query_block_size)

    def _accumulate(self, chunk: ChunkQueries, keys: torch.Tensor, block_size: int) -> None:
        scaling, softcap = attention_scaling(chunk.module), logit_softcap(chunk.module)
        total = None
        for first in range(0, chunk.length, block_size):
            last = min(first + block_size, chunk.length)
            probabilities = attention_probabilities(
                chunk.queries(first, last), keys, chunk.positions(first, last), scaling, softcap
            )
            block_sum = probabilities.sum(dim=3)
            total = block_sum if total is None else total + block_sum
        if self.accumulated_attention is not None:
            grown = keys.shape[2] - self.accumulated_attention.shape[-1]
            total = total + torch.nn.functional.pad(self.accumulated_attention, (0, grown))
        self.accumulated_attention = total


@dataclass
class LayerRecord:
    """What happened to one layer's prompt cache.

    kept_positions: (batch, kv_heads, slots) the prompt position in each cache slot: ascending, window last;
    scores: (batch, kv_heads, prompt_length) policy scores, or None when nothing was scored (the prompt fitted, the
    method keeps all, or a sliding layer). kept_counts: (batch, kv_heads) real tokens per head when heads keep
    different numbers (AdaKV); each row's slots after its count are padding (the last prompt position repeated,
    masked out of attention). None when every slot is real.
    """

    layer: int
    prompt_length: int
    capacity: int
    kept_positions: torch.Tensor
    scores: torch.Tensor | None
    bytes_before: int
    bytes_after: int
    sliding: bool = False
    kept_counts: torch.Tensor | None = None

    @property
    def compressed(self) -> bool:
        """Whether the policy evicted anything (a sliding layer's own window does not count)."""
        return not self.sliding and bool((self.kept_per_head() < self.prompt_length).any())

    def kept_per_head(self) -> torch.Tensor:
        """(batch, kv_heads) int64 real tokens each KV head keeps (window included; padding not counted)."""
        if self.kept_counts is not None:
            return self.kept_counts
        return torch.full(self.kept_positions.shape[:2], self.kept_positions.shape[-1], dtype=torch.long)

    def head_positions(self, batch: int, head: int) -> torch.Tensor:
        """(kept,) the ascending prompt positions one KV head keeps, without padding."""
        return self.kept_positions[batch, head, : int(self.kept_per_head()[batch, head])]

    def kept_scores(self) -> torch.Tensor | None:
        """(batch, kv_heads, kept) scores of the kept positions."""
        if self.scores is None:
            return None
        return self.scores.gather(-1, self.kept_positions)


def _state_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class SnapKVCache(DynamicCache):
    """A ``DynamicCache`` whose prompt part is compressed by SnapKV (or another policy) as the prefill runs.

    Usage::

        prepare(model)  # once per model
        cache = SnapKVCache(window_size=32, max_capacity_prompt=4096, kernel_size=5, pooling="avgpool")
        model.generate(inputs, past_key_values=cache)

    Each layer is compressed right after its keys and values are stored, so at most one layer's uncompressed
    prompt KV is alive (the one its own attention is using). ``records`` tells, per layer, what was kept.
    Inside :meth:`deferred`, forwards only store (chunked prefill, a shared document prefix); the first forward
    outside it compresses, selecting with the last ``window_size`` prompt tokens' queries over all keys.
    """

    def __init__(
        self,
        window_size: int | None = None,
        max_capacity_prompt: int | float | None = None,
        kernel_size: int | None = None,
        pooling: str | None = None,
        *,
        method: str | None = None,
        gqa_aggregation: str | None = None,
        settings: CompressionSettings | None = None,
        config=None,
        accumulate_attention: bool | None = None,
    ):
        """Compress as ``settings`` say, or as the individual values say (the rest from
        :class:`CompressionSettings`'s defaults: the paper's window 32, kernel 5, avgpool, capacity 4096)."""
        super().__init__(config=config)
        self._use_buffered_layers()
        given = {name: value for name, value in dict(
            window_size=window_size, max_capacity_prompt=max_capacity_prompt, kernel_size=kernel_size,
            pooling=pooling, method=method, gqa_aggregation=gqa_aggregation).items() if value is not None}
        if settings is not None and given:
            raise ValueError(f"pass either settings or individual values ({', '.join(given)}), not both")
        self.settings = settings or CompressionSettings(**given)
        self.policy = POLICIES[self.settings.method](self.settings)
        # attention sums over every prompt query: needed by H2O, and by a prefix that H2O forks may continue
        self.accumulate_attention = self.policy.accumulates_attention if accumulate_attention is None \
            else accumulate_attention
        self.records: dict[int, LayerRecord] = {}
        self._pending: dict[int, PendingLayer] = {}
        self._chunks: dict[int, ChunkQueries] = {}
        self._deferring = False
        self._masks: dict[int, CompressedLayerMask] = {}  # compressed layers that need a mask of their own
        self.selection_seconds = 0.0  # time spent on window queries, scoring and gathering (not synchronized)
        # (prompt_length,) int64 word of each prompt token, on the model's device: needed with settings.whole_words
        # (generation sets it; the policy gets it in each layer's context)
        self.word_ids: torch.Tensor | None = None

    # -- called by the prepared model's hooks ----------------------------------------------------------------
    def bind_config(self, config) -> None:
        """Lay out the layers as ``DynamicCache(config=config)`` would (sliding-window layers stay sliding).

        Called before the first forward, so a cache built without a config still masks hybrid models right.
        """
        if self.layer_class_to_replicate is None or self.layers:
            return
        layers = DynamicCache(config=config).layers
        if layers:
            self.layers, self.layer_class_to_replicate = layers, None
            self._use_buffered_layers()

    def _use_buffered_layers(self) -> None:
        """Full-attention layers write decoded tokens in place (no per-step copy); sliding layers stay as they are."""
        if self.layer_class_to_replicate is DynamicLayer:
            self.layer_class_to_replicate = BufferedLayer
        self.layers = [BufferedLayer() if type(layer) is DynamicLayer and not layer.is_initialized else layer
                       for layer in self.layers]

    def observe(self, module: nn.Module, hidden_states: torch.Tensor, position_embeddings) -> None:
        """Remember this forward's attention inputs for a layer that is not compressed yet."""
        layer_idx = module.layer_idx
        if layer_idx in self.records:
            return
        cos, sin = position_embeddings
        self._chunks[layer_idx] = ChunkQueries(module, hidden_states, cos, sin, self.get_seq_length(layer_idx))

    def attention_mask(self, layer_idx: int, query_length: int, model_mask, dtype: torch.dtype,
                       device: torch.device) -> torch.Tensor | None:
        """A mask to use instead of ``model_mask`` for this forward's attention in layer ``layer_idx``, or None to
        keep the model's own.

        A layer whose heads are padded always gets its own (batch, query_heads, query_length, keys) additive mask
        hiding the padding. Another compressed layer gets a causal one of its own length only where the model's mask
        is a tensor sized for a layer of another length (PyramidKV under eager attention, say).
        """
        record = self.records.get(layer_idx)
        if record is None or record.sliding:
            return None
        key_length = self.get_seq_length(layer_idx) + query_length
        mask = self._masks.get(layer_idx)
        if mask is None:
            if not isinstance(model_mask, torch.Tensor) or model_mask.shape[-1] == key_length:
                return None
            mask = self._masks[layer_idx] = CompressedLayerMask()
        return mask.mask(query_length, key_length, dtype, device)

    # -- transformers' Cache API -----------------------------------------------------------------------------
    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Store like ``DynamicCache``; return the full keys/values for this forward's attention.

        key_states, value_states: (batch, kv_heads, new_tokens, head_dim).
        """
        keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        if layer_idx in self.records:
            return keys, values
        chunk = self._chunks.pop(layer_idx, None)
        if chunk is None:
            raise RuntimeError(
                "SnapKVCache got keys without the layer's hidden states: call snapkv_cli.prepare(model) once "
                "before running the model with this cache"
            )
        if is_sliding_layer(chunk.module):
            if not self._deferring:
                self._record_uncompressed(layer_idx, keys, chunk.start + chunk.length, sliding=True)
            return keys, values
        started = time.perf_counter()
        pending = self._pending.setdefault(layer_idx, PendingLayer())
        pending.absorb(chunk, keys, self.settings, self.accumulate_attention)
        if not self._deferring:
            self._compress(layer_idx, chunk.module, keys, values, self._pending.pop(layer_idx))
        self.selection_seconds += time.perf_counter() - started
        return keys, values

    @contextmanager
    def deferred(self):
        """Forwards inside only store the prompt; compression waits for the first forward after it."""
        self._deferring = True
        try:
            yield self
        finally:
            self._deferring = False
        self.selection_seconds = 0.0  # time spent on window queries, scoring and gathering (not synchronized)

    def fork(self, settings: CompressionSettings | None = None) -> SnapKVCache:
        """A cache that continues this uncompressed prefix (filled inside :meth:`deferred`) without changing it.

        The fork shares the prefix's tensors; continuing it (a question, then decoding) concatenates into new
        tensors, so the prefix can serve question after question, each with its own SnapKV selection over all keys.
        ``settings`` may change the method and budget, and shrink (never grow) the window.
        """
        settings = settings or self.settings
        if self.records and not all(record.sliding for record in self.records.values()):
            raise ValueError("only an uncompressed prefix (filled inside deferred()) can be forked")
        if settings.window_size > self.settings.window_size:
            raise ValueError(f"the prefix kept queries for a window of {self.settings.window_size} tokens; "
                             f"build it with window_size >= {settings.window_size}")
        needs_sums = POLICIES[settings.method].accumulates_attention
        if needs_sums and not self.accumulate_attention:
            raise ValueError(f"method {settings.method!r} needs attention sums: build the prefix with "
                             "accumulate_attention=True")
        fork = SnapKVCache(settings=settings, accumulate_attention=needs_sums)
        fork.layers = [self._detached(layer) for layer in self.layers]
        fork.layer_class_to_replicate = self.layer_class_to_replicate
        fork._pending = {index: replace(pending) for index, pending in self._pending.items()}
        return fork

    # -- an uncompressed prefix as plain tensors (the document cache stores this) -----------------------------
    PREFIX_STATE_PARTS = ("keys", "values", "window_queries", "window_positions")

    def prefix_state(self) -> dict[str, torch.Tensor]:
        """The tensors that rebuild this uncompressed prefix (filled inside :meth:`deferred`), keyed by name.

        Per layer ``i``: ``layers.i.keys`` and ``layers.i.values`` (batch, kv_heads, prefix_length, head_dim),
        ``layers.i.window_queries`` (batch, query_heads, <= window_size, head_dim) and ``layers.i.window_positions``
        (<= window_size,), the last prefix tokens' rotated queries and their positions (a later question's window
        can reach back into them); with ``accumulate_attention`` also ``layers.i.accumulated_attention``
        (batch, kv_heads, group, prefix_length). The tensors are the cache's own (not copies).
        Raises ``ValueError`` for a compressed cache or sliding-window layers (their states are not the prompt).
        """
        if self.records:
            raise ValueError("only an uncompressed prefix (filled inside deferred()) has a prefix state")
        if any(self.is_sliding):
            raise ValueError("the model has sliding-window layers, whose prefix cannot be exported")
        state = {}
        for index, layer in enumerate(self.layers):
            pending = self._pending.get(index)
            if pending is None or pending.window_queries is None:
                raise ValueError(f"layer {index} has no window queries: prefill the prefix first")
            parts = {"keys": layer.keys, "values": layer.values, "window_queries": pending.window_queries,
                     "window_positions": pending.window_positions}
            if self.accumulate_attention:
                parts["accumulated_attention"] = pending.accumulated_attention
            state.update({f"layers.{index}.{name}": tensor for name, tensor in parts.items()})
        return state

    @classmethod
    def from_prefix_state(cls, state: dict[str, torch.Tensor], config, window_size: int, *,
                          accumulate_attention: bool = False, device: torch.device | str | None = None
                          ) -> SnapKVCache:
        """The uncompressed prefix that :meth:`prefix_state` described, ready for :meth:`fork`.

        Each layer's tensors are popped from ``state`` as they are moved to ``device``, so at most one extra layer
        is alive at a time. ``state`` must hold every part of every layer of ``config``'s model.
        """
        settings = CompressionSettings(method="full", window_size=window_size, max_capacity_prompt=window_size + 1)
        cache = cls(settings=settings, config=config, accumulate_attention=accumulate_attention)
        for index, layer in enumerate(cache.layers):
            parts = {name: state.pop(f"layers.{index}.{name}").to(device)
                     for name in cls.PREFIX_STATE_PARTS + (("accumulated_attention",) if accumulate_attention else ())}
            layer.update(parts.pop("keys"), parts.pop("values"))
            cache._pending[index] = PendingLayer(**parts)
        return cache

    @staticmethod
    def _detached(layer):
        """A copy of a layer sharing its states; a buffered copy writes its own tokens into a buffer of its own."""
        return layer.shared_copy() if isinstance(layer, BufferedLayer) else copy.copy(layer)

    # -- compression -----------------------------------------------------------------------------------------
    def _compress(self, layer_idx: int, module: nn.Module, keys: torch.Tensor, values: torch.Tensor,
                  pending: PendingLayer) -> None:
        prompt_length = keys.shape[2]
        context = LayerContext(
            layer_idx=layer_idx,
            num_layers=module.config.num_hidden_layers,
            keys=keys,
            values=values,
            window_queries=pending.window_queries,
            window_positions=pending.window_positions,
            scaling=attention_scaling(module),
            softcap=logit_softcap(module),
            settings=self.settings,
            accumulated_attention=pending.accumulated_attention,
            output_projection=output_projection(module),
            word_ids=self.word_ids,
        )
        selection = self.policy.select(context)
        kept = selection.kept
        if kept is None:
            self._record_uncompressed(layer_idx, keys, prompt_length, capacity=selection.capacity)
            return
        if kept.padded:
            implementation = module.config._attn_implementation
            if implementation not in MASKABLE_ATTENTION:
                raise UnsupportedAttention(self.settings.method, implementation, MASKABLE_ATTENTION)
            group = pending.window_queries.shape[1] // keys.shape[1]
            self._masks[layer_idx] = CompressedLayerMask(kept.counts, kept.positions.shape[-1], group)
        layer = self.layers[layer_idx]
        kept_keys, kept_values = gather_positions(keys, kept.positions), gather_positions(values, kept.positions)
        if isinstance(layer, BufferedLayer):
            layer.replace_states(kept_keys, kept_values)
        else:
            layer.keys, layer.values = kept_keys, kept_values
        self.records[layer_idx] = LayerRecord(
            layer=layer_idx,
            prompt_length=prompt_length,
            capacity=selection.capacity,
            kept_positions=kept.positions,
            scores=selection.scores,
            bytes_before=_state_bytes(keys, values),
            bytes_after=_state_bytes(layer.keys, layer.values),
            kept_counts=kept.counts,
        )

    def _record_uncompressed(self, layer_idx: int, keys: torch.Tensor, prompt_length: int, *,
                             capacity: int | None = None, sliding: bool = False) -> None:
        """Record a layer kept as stored: all of the prompt, or a sliding layer's last tokens.

        Its bytes before and after are both what it stores. A sliding layer never stores more than its window, with
        or without compression, so the report's totals count what a cache really holds.
        keys: (batch, kv_heads, attended, head_dim), what this forward's attention saw.
        """
        batch, kv_heads = keys.shape[:2]
        stored = self.layers[layer_idx]
        kept = stored.keys.shape[2]
        stored_bytes = _state_bytes(stored.keys, stored.values)
        self.records[layer_idx] = LayerRecord(
            layer=layer_idx,
            prompt_length=prompt_length,
            capacity=prompt_length if capacity is None else capacity,
            kept_positions=torch.arange(prompt_length - kept, prompt_length, device=keys.device).expand(
                batch, kv_heads, kept),
            scores=None,
            bytes_before=stored_bytes,
            bytes_after=stored_bytes,
            sliding=sliding,
        )

    # -- reporting -------------------------------------------------------------------------------------------
    @property
    def prompt_length(self) -> int:
        return max((record.prompt_length for record in self.records.values()), default=0)

    def summary(self) -> dict:
        """Cache sizes before and after compression, over all recorded layers.

        ``tokens_after`` is the mean number of prompt tokens a (layer, KV head) keeps; ``tokens_allocated`` the mean
        number of cache slots it holds them in (larger only where heads keep different numbers and are padded);
        ``bytes_after`` is what is allocated, padding included.
        """
        records = [self.records[i] for i in sorted(self.records)]
        bytes_before = sum(r.bytes_before for r in records)
        bytes_after = sum(r.bytes_after for r in records)
        kept = [float(r.kept_per_head().float().mean()) for r in records]
        slots = [r.kept_positions.shape[-1] for r in records]
        return {
            "tokens_before": self.prompt_length,
            "tokens_after": round(sum(kept) / len(kept), 2) if kept else 0,
            "tokens_allocated": round(sum(slots) / len(slots), 2) if slots else 0,
            "bytes_before": bytes_before,
            "bytes_after": bytes_after,
            "compression_ratio": round(bytes_before / bytes_after, 4) if bytes_after else 1.0,
        }
