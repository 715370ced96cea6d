"""The command line's defaults, in one place: plain values that import nothing, so every layer may read them and
`snapkv --help` stays fast.

The library's own defaults are the SnapKV paper's and live in :class:`snapkv_cli.engine.CompressionSettings`
(window 32, kernel 5, avgpool, capacity 4096); ``SnapKVCache`` takes them from there. The command line and the
benchmarks use the values below instead (:func:`cli_setting`), chosen by measurement on the default model
(docs/benchmarks.md): its digits are single tokens, so a 5-digit code spans 5+ tokens and wide max pooling keeps it
whole where avgpool 5 cuts it short; a budget of 1024 tokens per layer and KV head is SnapKV's smallest published
LongBench setting.
"""

CLI_DEFAULTS = dict(window_size=32, max_capacity_prompt=1024, kernel_size=15, pooling="maxpool")

# The method when --method is not given, and the settings it comes with (each yields to its own option), chosen on
# the tune split (docs/decisions/2026-12-01-default-method.md): DefensiveKV's worst-case
# votes with the same budget for every KV head (the paper's DefensiveKV, `--method defensivekv`, splits it
# adaptively over padded heads: it kept no more answers on the tune split, in 39% more KV bytes), pooled in the
# causal window (docs/decisions/2026-12-01-causal-pooling-window.md: the end of a code follows the phrase the question
# matches).
METHOD = "defensivekv"
METHOD_SETTINGS = dict(head_budgets="uniform", pooling_window="causal")

# Whether --dtype auto on a CPU that computes bfloat16 natively (AVX512_BF16, AMX, aarch64 bf16; detected in
# snapkv_cli/models/cpu_features.py) loads the weights in bfloat16 rather than float32. Selection math stays float32
# either way. docs/decisions/2026-12-02-cpu-weight-dtype.md: set before the paired accuracy run against float32,
# which decides whether it stays.
CPU_AUTO_BFLOAT16 = False
