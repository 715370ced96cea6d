"""The on-disk cache of prefilled documents (``--cache-docs``): a prompt prefix's full KV, so a later question skips
the prefill.

:mod:`.store` holds the cache (entries, validation, the size cap), :mod:`.keys` what identifies an entry,
:mod:`.tensor_file` reads one safetensors file through one open file and :mod:`.secret` keeps the directory's HMAC
secret. An entry stores the engine's :class:`~snapkv_cli.engine.prefix_state.PrefixState` (whose module names its
tensors and lays them out from a model's config) and the prefix's token ids. Importing this package does not import
torch.
"""

from .keys import prefix_key
from .store import DEFAULT_CAP_MB, DOC_CACHE_ENV, DOC_CACHE_MB_ENV, DocCache, parse_age

__all__ = ["DEFAULT_CAP_MB", "DOC_CACHE_ENV", "DOC_CACHE_MB_ENV", "DocCache", "parse_age", "prefix_key"]
