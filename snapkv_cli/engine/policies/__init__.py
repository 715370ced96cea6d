"""Compression policies by name. Each one only scores positions, ranks them, or allots budgets.

The methods and their facts are declared in :mod:`snapkv_cli.engine.methods`; :data:`POLICIES` holds each one's
class, in that declaration's order.
"""

from __future__ import annotations

from ..methods import METHODS
from .adakv import AdaKVPolicy
from .base import LayerContext, Policy
from .chunkkv import ChunkKVPolicy
from .criticalkv import CriticalKVPolicy
from .defensivekv import DefensiveKVPolicy
from .full import FullPolicy
from .h2o import H2OPolicy
from .pyramidkv import PyramidKVPolicy
from .random import RandomPolicy
from .snapkv import SnapKVPolicy
from .streamingllm import StreamingLLMPolicy
from .tova import TOVAPolicy

_CLASSES = {policy.name: policy for policy in (
    AdaKVPolicy, ChunkKVPolicy, CriticalKVPolicy, DefensiveKVPolicy, FullPolicy, H2OPolicy, PyramidKVPolicy,
    RandomPolicy, SnapKVPolicy, StreamingLLMPolicy, TOVAPolicy)}
POLICIES: dict[str, type[Policy]] = {name: _CLASSES[name] for name in METHODS}  # a method without a class: KeyError
POLICY_NAMES = tuple(POLICIES)

__all__ = ["POLICIES", "POLICY_NAMES", "LayerContext", "Policy"]
