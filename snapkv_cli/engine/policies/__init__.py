"""Compression policies by name. Each one only scores positions, ranks them, or allots budgets."""

from __future__ import annotations

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

POLICIES: dict[str, type[Policy]] = {
    policy.name: policy
    for policy in (SnapKVPolicy, FullPolicy, StreamingLLMPolicy, H2OPolicy, TOVAPolicy, RandomPolicy, PyramidKVPolicy,
                   AdaKVPolicy, CriticalKVPolicy, DefensiveKVPolicy, ChunkKVPolicy)
}
POLICY_NAMES = tuple(POLICIES)

__all__ = ["POLICIES", "POLICY_NAMES", "LayerContext", "Policy"]
