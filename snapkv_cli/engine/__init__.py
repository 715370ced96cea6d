"""The SnapKV engine: policies score prompt positions, the cache keeps the best ones per layer and KV head."""

from .cache import SnapKVCache
from .families import SUPPORTED_FAMILIES, check_supported
from .hooks import attached, prepare, unprepare
from .policies import POLICIES, POLICY_NAMES
from .records import LayerRecord
from .settings import CompressionSettings

__all__ = [
    "POLICIES",
    "POLICY_NAMES",
    "SUPPORTED_FAMILIES",
    "CompressionSettings",
    "LayerRecord",
    "SnapKVCache",
    "attached",
    "check_supported",
    "prepare",
    "unprepare",
]
