"""A cache layer that writes new tokens into room it already has, instead of concatenating.

transformers' ``DynamicLayer`` concatenates on every update, copying the whole layer for each decoded token; at 8k
cached tokens that copy is most of the decode time on a CPU. ``BufferedLayer`` keeps ``keys``/``values`` as views
into a larger buffer and only reallocates when the room runs out (then with ``headroom`` more tokens).
"""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import DynamicLayer


def _shares_storage(view: torch.Tensor | None, buffer: torch.Tensor | None) -> bool:
    return (view is not None and buffer is not None
            and view.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr())


class BufferedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose states are views ``buffer[:, :, :length]``; updates write in place.

    Anything that replaces ``keys``/``values`` with other tensors (compression, cropping to a copy) is noticed at the
    next update, which then moves them into a fresh buffer.
    """

    headroom = 256

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def _reallocate(self, extra: int) -> None:
        """Move the current states into buffers with room for ``extra`` more tokens plus the headroom."""
        length = self.get_seq_length()
        self._key_buffer = self._grow(self.keys, length, extra)
        self._value_buffer = self._grow(self.values, length, extra)

    def _grow(self, states: torch.Tensor, length: int, extra: int) -> torch.Tensor | None:
        if states.dim() != 4:  # still the empty placeholder of lazy_initialization
            return None
        batch, heads, _, head_dim = states.shape
        buffer = states.new_empty(batch, heads, length + extra + self.headroom, head_dim)
        buffer[:, :, :length] = states[:, :, :length]
        return buffer

    def replace_states(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Make ``keys``/``values`` (batch, heads, tokens, head_dim) the layer's states, with room to grow."""
        self.keys, self.values = keys, values
        self._reallocate(0)
        self.keys = self._key_buffer[:, :, : keys.shape[2]]
        self.values = self._value_buffer[:, :, : values.shape[2]]

    def shared_copy(self) -> BufferedLayer:
        """A layer that continues this one: it shares the current states, and writes its own new tokens into a
        buffer of its own (so neither layer sees the other's)."""
        clone = copy.copy(self)
        clone._key_buffer = clone._value_buffer = None
        return clone

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """key_states, value_states: (batch, heads, new_tokens, head_dim); returns views of all stored tokens."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, new = self.get_seq_length(), key_states.shape[2]
        if self.keys.dim() != 4:  # first update: the buffers take the states' shape
            self.keys, self.values = key_states[:, :, :0], value_states[:, :, :0]
        owned = _shares_storage(self.keys, self._key_buffer) and _shares_storage(self.values, self._value_buffer)
        if not owned or length + new > self._key_buffer.shape[2]:
            self._reallocate(new)
        self._key_buffer[:, :, length:length + new] = key_states
        self._value_buffer[:, :, length:length + new] = value_states
        self.keys = self._key_buffer[:, :, : length + new]
        self.values = self._value_buffer[:, :, : length + new]
        return self.keys, self.values

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        super().reset()
