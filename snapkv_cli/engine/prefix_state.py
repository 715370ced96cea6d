"""An uncompressed prefix as one value (what the document cache stores and every question forks), and the names and
layout of its tensors when stored.

:meth:`SnapKVCache.prefix_state() <snapkv_cli.engine.SnapKVCache.prefix_state>` hands out a :class:`PrefixState`
and :meth:`SnapKVCache.from_prefix_state() <snapkv_cli.engine.SnapKVCache.from_prefix_state>` rebuilds a cache from
one. Stored, a state is named tensors (:meth:`PrefixState.tensors`), per layer ``i`` one for each field of
:class:`PrefixLayer`:

- ``layers.i.keys``, ``layers.i.values``: (1, kv_heads, prefix_tokens, head_dim), the model's dtype
- ``layers.i.window_queries``: (1, query_heads, window, head_dim), the model's dtype
- ``layers.i.window_positions``: (window,), int64
- ``layers.i.accumulated_attention`` (with attention sums, for H2O): (1, kv_heads, query_heads // kv_heads,
  prefix_tokens), float32

where window = min(window_size, prefix_tokens). :meth:`PrefixState.layout` derives exactly these from a model's
config; :func:`check_layout` and :func:`check_window_positions` compare tensors read from elsewhere with it before
anything is imported into a cache, so a file of the wrong shape or dtype is refused instead of crashing (or silently
corrupting) the attention. The module imports torch only to lay out a prefix: the document cache, which the command
line reads for its options, imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import MISSING, dataclass, fields
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import torch

Part = TypeVar("Part")


class PrefixLayoutMismatch(ValueError):
    """The tensors do not have the names, shapes, dtypes or positions this model's prefix has (the message says
    which)."""


@dataclass
class PrefixLayer(Generic[Part]):
    """One layer of an uncompressed prefix: its keys and values and what a later question's observation window needs
    (the last prefix tokens' rotated queries and their positions: the window can reach back into them). Each field
    is one stored tensor of the layer; a layout holds each tensor's (shape, dtype) instead."""

    keys: Part  # (batch, kv_heads, prefix_tokens, head_dim)
    values: Part  # (batch, kv_heads, prefix_tokens, head_dim)
    window_queries: Part  # (batch, query_heads, <= window_size, head_dim)
    window_positions: Part  # (<= window_size,)
    accumulated_attention: Part | None = None  # (batch, kv_heads, group, prefix_tokens): kept with attention sums

    def named(self, index: int) -> dict[str, Part]:
        """Stored name -> part, for every part this layer (layer ``index``) has."""
        return {_name(index, part): value for part, value in self._parts().items() if value is not None}

    def to(self, device: torch.device | str | None) -> PrefixLayer:
        """This layer's tensors on ``device``."""
        moved = {part: None if value is None else value.to(device) for part, value in self._parts().items()}
        return PrefixLayer(**moved)

    def _parts(self) -> dict[str, Part | None]:
        """Field name -> value (the values themselves: ``dataclasses.asdict`` would copy tensors)."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


@dataclass
class PrefixState:
    """An uncompressed prefix (a ``SnapKVCache`` filled inside ``deferred()``): its layers, in order."""

    layers: list[PrefixLayer[torch.Tensor]]

    @property
    def attention_sums(self) -> bool:
        """Whether the layers kept attention sums (a prefix that H2O forks may continue)."""
        return any(layer.accumulated_attention is not None for layer in self.layers)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Stored name -> tensor, layer by layer (the state's own tensors, not copies)."""
        return {name: tensor for index, layer in enumerate(self.layers) for name, tensor in layer.named(index).items()}

    def take_layers(self) -> Iterator[PrefixLayer[torch.Tensor]]:
        """The layers in order, each taken out of this state as it is handed over (the state is empty afterwards), so
        a caller that moves them elsewhere keeps at most one extra layer alive."""
        while self.layers:
            yield self.layers.pop(0)

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], config, attention_sums: bool) -> PrefixState:
        """The state whose :meth:`tensors` these are, for a prefix of ``config``'s model (with attention sums or
        not). Its tensors are taken out of ``tensors`` (which may hold others: they stay); each must be there."""
        parts = [field.name for field in fields(PrefixLayer) if attention_sums or field.default is MISSING]
        return cls([PrefixLayer(**{part: tensors.pop(_name(index, part)) for part in parts})
                    for index in range(_Dimensions.of(config).layers)])

    @staticmethod
    def layout(config, dtype: torch.dtype, prefix_tokens: int, window_size: int, attention_sums: bool) -> dict:
        """Stored name -> (shape, dtype) of every tensor of a ``prefix_tokens``-token prefix of a model with
        ``config`` (a transformers config; its text config is used) run in ``dtype``."""
        import torch

        model = _Dimensions.of(config)
        window = min(window_size, prefix_tokens)
        keys = ((1, model.kv_heads, prefix_tokens, model.head_dim), dtype)
        sums = ((1, model.kv_heads, model.query_heads // model.kv_heads, prefix_tokens), torch.float32)
        layer = PrefixLayer(keys=keys, values=keys,
                            window_queries=((1, model.query_heads, window, model.head_dim), dtype),
                            window_positions=((window,), torch.int64),
                            accumulated_attention=sums if attention_sums else None)
        return {name: spec for index in range(model.layers) for name, spec in layer.named(index).items()}


def check_layout(tensors: dict, layout: dict) -> None:
    """Raise :class:`PrefixLayoutMismatch` unless ``tensors`` has exactly ``layout``'s names, shapes and dtypes
    (a layout of :meth:`PrefixState.layout`, with any tensors stored beside the state's)."""
    if set(tensors) != set(layout):
        missing, extra = sorted(set(layout) - set(tensors)), sorted(set(tensors) - set(layout))
        raise PrefixLayoutMismatch(f"unexpected tensor names (missing {missing[:3]}, extra {extra[:3]})")
    for name, (shape, dtype) in layout.items():
        tensor = tensors[name]
        index, part = _parse(name)
        where = f"layer {index}: " if index is not None else ""
        label = "keys/values" if part in ("keys", "values") else part.replace("_", " ")
        if tuple(tensor.shape) != shape:
            raise PrefixLayoutMismatch(f"{where}{label} of shape {tuple(tensor.shape)}, expected {shape}")
        if tensor.dtype != dtype:
            raise PrefixLayoutMismatch(f"{where}{label} of dtype {tensor.dtype}, expected {dtype}")


def check_window_positions(tensors: dict, prefix_tokens: int, window_size: int) -> None:
    """Raise :class:`PrefixLayoutMismatch` unless every layer's window positions in ``tensors`` (named as stored) are
    the prefix's last ``min(window_size, prefix_tokens)`` positions."""
    import torch

    expected = torch.arange(prefix_tokens - min(window_size, prefix_tokens), prefix_tokens)
    for name, tensor in tensors.items():
        index, part = _parse(name)
        if part == "window_positions" and not torch.equal(tensor, expected):
            raise PrefixLayoutMismatch(f"layer {index}: wrong window positions")


def _name(index: int, part: str) -> str:
    """The stored name of layer ``index``'s ``part`` (a field of :class:`PrefixLayer`)."""
    return f"layers.{index}.{part}"


def _parse(name: str) -> tuple[str | None, str]:
    """(layer index, part) of a stored name; (None, the name) for a tensor stored beside the layers."""
    if name.startswith("layers."):
        _, index, part = name.split(".", 2)
        return index, part
    return None, name


@dataclass(frozen=True)
class _Dimensions:
    """What a model's config says of its prefix's tensors."""

    layers: int
    query_heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, config) -> _Dimensions:
        """From a transformers config (its text config): an explicit head size wins over hidden size / heads; a
        config without grouped-query attention has as many KV heads as query heads."""
        config = config.get_text_config()
        query_heads = config.num_attention_heads
        return cls(layers=config.num_hidden_layers, query_heads=query_heads,
                   kv_heads=getattr(config, "num_key_value_heads", None) or query_heads,
                   head_dim=getattr(config, "head_dim", None) or config.hidden_size // query_heads)
