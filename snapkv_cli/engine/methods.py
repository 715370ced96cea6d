"""The compression methods, declared once: each one's name, description, paper, and the facts about it that the
engine, the command line, the benchmarks and the README read.

Free of torch, so that ``snapkv --help`` lists the methods (with their descriptions) before any model loads. Each
policy class is bound to its entry (``class SnapKVPolicy(Policy, method="snapkv")``,
:mod:`snapkv_cli.engine.policies`) and takes these facts as its class attributes. The order here is the order of
every list of methods: the registry, the ``--method`` help, the benchmark tables and the README's table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """One compression method and what the rest of the program needs to know of it without running it."""

    name: str
    description: str  # one line: what the --method help says of it (through settings.with_defaults)
    keeps: str  # Markdown: what each layer and KV head keeps (the README's methods table, through with_defaults)
    paper: str = ""  # Markdown link to its paper
    compresses: bool = True  # False: the full cache, no budget applies
    pools_votes: bool = False  # its scores are pooled window votes (kernel_size, pooling, pooling_window apply)
    accumulates_attention: bool = False  # it reads attention summed over every prompt query (the cache keeps sums)
    default_layer_budgets: str = "uniform"  # how it shares the budget over layers unless the settings choose
    default_head_budgets: str = "uniform"  # and over a layer's KV heads
    same_on_every_head: bool = False  # its ranking does not depend on the head (sharing positions changes nothing)
    benchmarked_by_default: bool = False  # in `snapkv bench accuracy|niah`'s default --methods


METHODS: dict[str, Method] = {method.name: method for method in (
    Method("full", "no compression, the full cache", "everything", compresses=False, benchmarked_by_default=True),
    Method("snapkv", "the observation window's attention votes, pooled, as in the SnapKV paper",
           "the observation window (last `window` tokens) plus the top `budget - window` earlier positions by the "
           "window's attention, summed over window queries, pooled (`kernel`, `maxpool`/`avgpool`), averaged (or "
           "maxed, `--gqa`) over the query heads of the KV group",
           "[SnapKV](https://arxiv.org/abs/2404.14469)", pools_votes=True, benchmarked_by_default=True),
    Method("pyramidkv", "SnapKV scores with per-layer budgets decreasing with depth",
           "SnapKV scores, budgets decreasing with depth (arithmetic sequence, same mean budget)",
           "[PyramidKV](https://arxiv.org/abs/2406.02069)", pools_votes=True, default_layer_budgets="pyramid",
           benchmarked_by_default=True),
    Method("adakv", "SnapKV scores, one top-k over all KV heads of a layer with a per-head floor, as AdaKV",
           "SnapKV scores; the layer's budget (KV heads x `budget - window`) goes to the best positions of any head "
           "by one top-k over all heads of the layer, after each head has its own top `head_floor` ({head_floor}) of "
           "its even share: heads that spread their attention get more room than heads that look at a few tokens. "
           "Heads then keep different numbers of tokens (layout below)",
           "[Ada-KV](https://arxiv.org/abs/2407.11550) (Ada-SnapKV)", pools_votes=True,
           default_head_budgets="adaptive"),
    Method("criticalkv", "SnapKV scores; {critical_first_stage:.0%} of each head's budget by attention, the rest by "
           "attention x ||W_o v||, as CriticalKV",
           "SnapKV scores; {critical_first_stage:.0%} of each head's budget (`critical_first_stage`) by score, the "
           "rest by score x `\\|W_o v\\|_1`, the value projected through its query heads' columns of the output "
           "projection (mean over the group): an entry's effect on the layer's output is its attention times that "
           "projected value",
           "[CriticalKV](https://arxiv.org/abs/2502.03805)", pools_votes=True),
    Method("defensivekv", "worst-case window votes with a prior floor on Ada-CriticalKV, as DefensiveKV",
           "each position's worst case instead of the sum: the largest attention any window query (any query head of "
           "the group) gave it, each query's row pooled and rescaled to its own mass; raised to at least the mean "
           "over positions (the paper's prior correction); split over heads and selected as Ada-CriticalKV, as in "
           "the paper",
           "[DefensiveKV](https://arxiv.org/abs/2510.13334)", pools_votes=True, default_head_budgets="adaptive"),
    Method("chunkkv", "whole chunks of chunk_size tokens ranked by their summed window votes, as ChunkKV",
           "whole chunks of `chunk_size` ({chunk_size}) consecutive tokens ranked by their summed window votes (raw "
           "votes: the chunk sum replaces pooling; a short last chunk is scaled to full length); where a head's budget "
           "ends inside a chunk, that chunk's best tokens. Digits are single tokens in the default model, so a code "
           "is a run of positions that token-level selection can split",
           "[ChunkKV](https://arxiv.org/abs/2502.00299)"),
    Method("h2o", "attention accumulated over all prompt queries, the heavy hitters, plus a recent window",
           "attention accumulated over every prompt query (computed in blocks, never prompt x prompt) plus the window",
           "[H2O](https://arxiv.org/abs/2306.14048)", accumulates_attention=True, benchmarked_by_default=True),
    Method("tova", "the last token's attention, averaged over all heads of the layer",
           "the last token's attention averaged over all heads of the layer, plus the window",
           "[TOVA](https://arxiv.org/abs/2401.06104)"),
    Method("streamingllm", "attention sinks, the first tokens, plus the most recent tokens",
           "{sink_tokens} attention-sink tokens plus the most recent tokens",
           "[StreamingLLM](https://arxiv.org/abs/2309.17453)",
           same_on_every_head=True, benchmarked_by_default=True),
    Method("random", "uniformly random positions, a control", "random positions plus the window (a control)",
           benchmarked_by_default=True),
)}
