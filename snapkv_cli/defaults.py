"""Defaults of the command line, kept free of heavy imports so `snapkv --help` stays fast."""

# The CLI's defaults, chosen by measurement on the default model (docs/benchmarks.md): its digits are single
# tokens, so a 5-digit code spans 5+ tokens and wide max pooling keeps it whole where avgpool 5 cuts it short.
# The library's SnapKVCache keeps the official defaults (window 32, kernel 5, avgpool).
CLI_DEFAULTS = dict(window_size=32, max_capacity_prompt=1024, kernel_size=15, pooling="maxpool")
