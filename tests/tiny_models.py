"""Tiny randomly initialised models of every supported family, built from configs (no download)."""

from __future__ import annotations

import functools

import torch
import transformers

VOCAB = 96
COMMON = dict(vocab_size=VOCAB, hidden_size=96, intermediate_size=128, num_hidden_layers=3, num_attention_heads=6,
              num_key_value_heads=2, max_position_embeddings=2048, pad_token_id=0, bos_token_id=1, eos_token_id=2)

FAMILY_CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=None),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16),
    "gemma2": lambda: transformers.Gemma2Config(
        **COMMON, head_dim=16, query_pre_attn_scalar=24, sliding_window=24, attn_logit_softcapping=30.0,
        layer_types=["sliding_attention", "full_attention", "full_attention"]),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(
        **COMMON, head_dim=16, query_pre_attn_scalar=16, sliding_window=24,
        layer_types=["full_attention", "sliding_attention", "full_attention"]),
    "phi3": lambda: transformers.Phi3Config(
        **COMMON, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
}
FAMILIES = tuple(FAMILY_CONFIGS)


@functools.cache
def tiny_model(family: str = "llama", attn_implementation: str = "sdpa"):
    """A deterministic tiny causal LM of ``family`` in float32, eval mode. Cached: do not mutate it."""
    config = FAMILY_CONFIGS[family]()
    if family == "gemma2":
        attn_implementation = "eager"  # transformers offers Gemma 2 no sdpa path (soft-capping)
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    model.eval()
    # random init leaves attention nearly uniform; sharpen it so selection has something to find
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in ("q_proj", "k_proj", "qkv_proj")):
                parameter.mul_(8.0)
    return model


def warm_up() -> None:
    """Import every module of the package and run each family's tiny model (both attention implementations) once, so
    that transformers' lazily imported code is loaded and the models are built: done once in the process that mutation
    testing forks each mutant's test run from, it saves each run seconds of that. It runs no code of the package
    (what a mutant changes), only imports it."""
    import importlib
    import pkgutil

    import snapkv_cli

    for module in pkgutil.walk_packages(snapkv_cli.__path__, "snapkv_cli."):
        if not module.name.endswith("__main__"):  # that one runs the command line
            importlib.import_module(module.name)
    for family in FAMILIES:
        for implementation in ("sdpa", "eager"):
            with torch.no_grad():
                tiny_model(family, implementation)(prompt_ids(16), past_key_values=transformers.DynamicCache())


def prompt_ids(length: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, length), generator=generator)


CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer():
    """A byte-level BPE tokenizer trained in memory on the example documents (any text encodes, with offsets)."""
    from pathlib import Path

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = (Path(__file__).parent.parent / "examples" / "field_notes.txt").read_text(encoding="utf-8")
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator([corpus], trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                        unk_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tiny_model_dir(path, max_position_embeddings: int = 4096):
    """Save a tiny Llama and the tiny tokenizer as a model directory that ``snapkv --model PATH`` loads."""
    tokenizer = tiny_tokenizer()
    config = transformers.LlamaConfig(
        **{**COMMON, "vocab_size": len(tokenizer), "max_position_embeddings": max_position_embeddings,
           "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": None})
    torch.manual_seed(99)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path
