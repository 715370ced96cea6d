"""``SnapKVCache``: a transformers ``DynamicCache`` that compresses each layer's prompt KV at the end of the prefill.

Decoding then appends to the compressed layers as usual. The attention modules must be prepared once with
:func:`snapkv_cli.engine.hooks.prepare` so the cache can recompute the observation window's queries from each
layer's hidden states (this works under any attention implementation: eager, sdpa, flash). The cache stores and
keeps the books; what a layer gathers before it is compressed is in :mod:`.pending`, compressing it in
:mod:`.compression` (the policy selects), its record in :mod:`.records`, an uncompressed prefix as one value
(what the document cache stores) in :mod:`.prefix_state`.
"""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from dataclasses import replace

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, DynamicLayer

from .compression import compress_layer
from .families import is_sliding_layer
from .layers import BufferedLayer
from .masking import CompressedLayerMask
from .pending import ChunkQueries, PendingLayer
from .policies import POLICIES
from .prefix_norms import PrefixValueNorms
from .prefix_state import PrefixLayer, PrefixState
from .records import LayerRecord, longest_prompt, summarize, uncompressed_record
from .settings import CompressionSettings
from .threads import SelectionThreads


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
        self.pending: dict[int, PendingLayer] = {}  # layers not compressed yet: what each gathered so far
        self._chunks: dict[int, ChunkQueries] = {}
        self._deferring = False
        self._masks: dict[int, CompressedLayerMask] = {}  # compressed layers that need a mask of their own
        self._unpadded = CompressedLayerMask()  # the all-zero decoding mask every unpadded layer may share
        self.selection_seconds = 0.0  # time spent on window queries, scoring and gathering (not synchronized)
        self.selection_threads = SelectionThreads()
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
                       device: torch.device, *, packed_decode: bool = False) -> torch.Tensor | None:
        """A mask to use instead of ``model_mask`` for this forward's attention in layer ``layer_idx``, or None to
        keep the model's own.

        A layer whose heads are padded always gets its own (batch, query_heads, query_length, keys) additive mask
        hiding the padding. Another compressed layer gets a causal one of its own length only where the model's mask
        is a tensor sized for a layer of another length (PyramidKV under eager attention, say), and, with
        ``packed_decode`` (:func:`.masking.packs_decode_queries`) where the model has none, an all-zero one (the same
        tensor for every layer, a view of one row built once).
        """
        record = self.records.get(layer_idx)
        if record is None or record.sliding:
            return None
        key_length = self.get_seq_length(layer_idx) + query_length
        mask = self._masks.get(layer_idx)
        if mask is None:
            if model_mask is None and packed_decode:
                return self._unpadded.mask(query_length, key_length, dtype, device)
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
                self.records[layer_idx] = uncompressed_record(layer_idx, keys, self.layers[layer_idx],
                                                              chunk.start + chunk.length, sliding=True)
            return keys, values
        started = time.perf_counter()
        with self.selection_threads.step(keys.device, compresses=not self._deferring):
            pending = self.pending.setdefault(layer_idx, PendingLayer())
            pending.absorb(chunk, keys, self.settings, self.accumulate_attention)
            if not self._deferring:
                record, mask = compress_layer(self.policy, self.layers[layer_idx], layer_idx, chunk.module, keys,
                                              values, self.pending.pop(layer_idx), self.word_ids)
                self.records[layer_idx] = record
                if mask is not None:
                    self._masks[layer_idx] = mask
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
        fork.layers = [_shared_copy(layer) for layer in self.layers]
        fork.layer_class_to_replicate = self.layer_class_to_replicate
        for index, pending in self.pending.items():  # kept with the prefix: every fork reads and fills the same
            if pending.value_norms is None:
                pending.value_norms = PrefixValueNorms(self.get_seq_length(index))
        fork.pending = {index: replace(pending) for index, pending in self.pending.items()}
        return fork

    @property
    def can_cut(self) -> bool:
        """Whether :meth:`head` can take fewer tokens than the whole prefix: not with attention sums (later tokens'
        queries are in them) nor sliding-window layers (they hold only their last tokens)."""
        return not self.accumulate_attention and not any(self.is_sliding)

    def head(self, tokens: int) -> SnapKVCache:
        """An uncompressed prefix of this one's first ``tokens`` tokens, for a prefill to continue from position
        ``tokens`` into a longer prefix; this one stays as it is (the tensors are shared, the continuation writes into
        new ones).

        The whole prefix continues as a chunked prefill would: its window queries and attention sums carry on. A
        shorter head drops them (later tokens' queries made them), so its continuation must be at least a window
        long; a prefix with attention sums, or with sliding-window layers, cannot be cut (``ValueError``).
        """
        length = self.get_seq_length()
        if self.records:
            raise ValueError("only an uncompressed prefix (filled inside deferred()) has a head")
        if not 0 < tokens <= length:
            raise ValueError(f"a head of {tokens} tokens of a {length}-token prefix")
        whole = tokens == length
        if not whole and not self.can_cut:
            raise ValueError("a prefix with attention sums or sliding-window layers can only be continued whole")
        head = SnapKVCache(settings=self.settings, accumulate_attention=self.accumulate_attention)
        head.layer_class_to_replicate = self.layer_class_to_replicate
        head.layers = [_shared_copy(layer) for layer in self.layers]
        if whole:  # value norms belong to a prefix of one length: the longer one finds its own
            head.pending = {index: replace(pending, value_norms=None) for index, pending in self.pending.items()}
        else:
            for layer in head.layers:
                layer.crop(tokens - length)
        return head

    # -- an uncompressed prefix as one value (the document cache stores it) -----------------------------------
    def prefix_state(self) -> PrefixState:
        """This uncompressed prefix (filled inside :meth:`deferred`) as a :class:`~.prefix_state.PrefixState` of the
        cache's own tensors (not copies).

        Raises ``ValueError`` for a compressed cache or sliding-window layers (their states are not the prompt).
        """
        if self.records:
            raise ValueError("only an uncompressed prefix (filled inside deferred()) has a prefix state")
        if any(self.is_sliding):
            raise ValueError("the model has sliding-window layers, whose prefix cannot be exported")
        layers = []
        for index, layer in enumerate(self.layers):
            pending = self.pending.get(index)
            if pending is None or pending.window_queries is None:
                raise ValueError(f"layer {index} has no window queries: prefill the prefix first")
            sums = pending.accumulated_attention if self.accumulate_attention else None
            layers.append(PrefixLayer(layer.keys, layer.values, pending.window_queries, pending.window_positions, sums))
        return PrefixState(layers)

    @classmethod
    def from_prefix_state(cls, state: PrefixState, config, window_size: int, *,
                          device: torch.device | str | None = None) -> SnapKVCache:
        """The uncompressed prefix ``state`` describes (a prefix of ``config``'s model), ready for :meth:`fork`.

        The state's layers are taken out of it as they are moved to ``device`` (it is empty afterwards), so at most
        one extra layer is alive at a time. It keeps attention sums if the state has them.
        """
        settings = CompressionSettings(method="full", window_size=window_size, max_capacity_prompt=window_size + 1)
        cache = cls(settings=settings, config=config, accumulate_attention=state.attention_sums)
        for index, (layer, stored) in enumerate(zip(cache.layers, state.take_layers(), strict=True)):
            stored = stored.to(device)
            layer.update(stored.keys, stored.values)
            cache.pending[index] = PendingLayer(window_queries=stored.window_queries,
                                                window_positions=stored.window_positions,
                                                accumulated_attention=stored.accumulated_attention)
        return cache

    # -- reporting -------------------------------------------------------------------------------------------
    @property
    def prompt_length(self) -> int:
        return longest_prompt(self.records)

    def summary(self) -> dict:
        """Cache sizes before and after compression, over all recorded layers.

        ``tokens_after`` is the mean number of prompt tokens a (layer, KV head) keeps; ``tokens_allocated`` the mean
        number of cache slots it holds them in (larger only where heads keep different numbers and are padded);
        ``bytes_after`` is what is allocated, padding included.
        """
        return summarize(self.records)


def _shared_copy(layer):
    """A copy of a layer sharing its states; a buffered copy writes its own tokens into a buffer of its own."""
    return layer.shared_copy() if isinstance(layer, BufferedLayer) else copy.copy(layer)
