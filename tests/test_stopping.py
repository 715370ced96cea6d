"""The base-model stop rule: where an answer ends without an end-of-sequence token, what streams before it, and how a
base model's session applies it (completion-style template, stop strings, report keys)."""

from __future__ import annotations

import pytest

from snapkv_cli.answering.documents import Document, Page
from snapkv_cli.answering.prompting import load_template
from snapkv_cli.answering.session import DocumentSession
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.generation import GenerationOptions, generate_answer
from snapkv_cli.generation.stopping import BASE_MODEL_STOP, LOOP_RULE, RepeatRule, StopRule
from snapkv_cli.models.loader import LoadedModel
from tests.helpers import DigitTokenizer
from tests.tiny_models import prompt_ids, tiny_model

RULE = StopRule(("\n\n", "\nQuestion:"))


@pytest.mark.parametrize(("text", "expected"), [
    ("K-4417.", None),
    ("K-4417.\n\n<document>", (7, "\n\n")),
    ("K-4417.\nQuestion: what else?", (7, "\nQuestion:")),
    ("\n\nK-4417.", None),  # leading blank lines never end an (empty) answer
    ("  K-4417.\n\nQuestion:", (9, "\n\n")),  # the earliest stop string wins
])
def test_cut(text, expected):
    assert RULE.cut(text) == expected


def test_cut_finds_a_stop_string_at_the_very_start_and_the_first_of_two():
    assert BASE_MODEL_STOP.cut("<document> more") == (0, "<document>")
    assert RULE.cut("A.\n\nB.\n\nC.") == (2, "\n\n")


@pytest.mark.parametrize(("text", "shown"), [
    ("K-4417.", 7),
    ("K-4417.\n", 7),  # "\n" may begin "\n\n" or "\nQuestion:": held back
    ("K-4417.\nQue", 7),
    ("K-4417.\nQues", 7),
    ("K-4417.\nQuiet", 13),  # no longer a possible stop string
    ("\n", 1),  # before the first visible character nothing is a stop string
])
def test_safe_length_holds_back_a_possible_stop_string(text, shown):
    assert RULE.safe_length(text) == shown


def test_base_model_rule_covers_the_prompt_markers():
    answer = "smoked juniper."
    for tail in ("\n\n", "\nQuestion: x", "\nAnswer: y", "<document>", "</document>"):
        assert BASE_MODEL_STOP.cut(answer + tail) == (len(answer), BASE_MODEL_STOP.cut(answer + tail)[1])


def _generate(stop_strings=(), on_text=None, max_new_tokens=12):
    model = tiny_model("llama")
    settings = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=40, kernel_size=5)
    return generate_answer(model, DigitTokenizer(), prompt_ids(80, seed=3)[0].tolist(), settings,
                           GenerationOptions(max_new_tokens=max_new_tokens, stop_at_eos=False,
                                             stop_strings=stop_strings), on_text=on_text)


def test_generation_stops_before_the_first_stop_string_and_never_streams_it():
    free = _generate()
    assert free.stop_reason == "max_new_tokens" and free.stop_string is None and len(free.generated_ids) == 12
    tokens = free.answer.split(" ")
    assert len(tokens) >= 6
    stop = f" {tokens[4]} "  # the fifth token, as it appears between spaces
    expected = free.answer[:free.answer.index(stop, len(tokens[0]))]
    pieces: list[str] = []
    stopped = _generate(stop_strings=(stop,), on_text=pieces.append)
    assert stopped.answer == expected.strip()
    assert (stopped.stop_reason, stopped.stop_string, stopped.stop_strings) == ("stop_string", stop, (stop,))
    assert "".join(pieces) == expected
    assert stop not in "".join(pieces)
    assert len(stopped.generated_ids) < 12  # decoding ended there


def test_no_stop_strings_means_only_eos_or_the_limit():
    result = _generate(max_new_tokens=5)
    assert result.stop_reason == "max_new_tokens" and result.stop_strings == ()


def _loaded(base_model: bool, tokenizer, model) -> LoadedModel:
    import torch

    return LoadedModel(model=model, tokenizer=tokenizer, name="tiny", source="tiny", device=torch.device("cpu"),
                       dtype=torch.float32, load_seconds=0.0, base_model=base_model)


@pytest.mark.parametrize("base_model", [True, False])
def test_a_base_model_session_uses_the_completion_template_and_the_stop_rule(base_model):
    import transformers

    from tests.tiny_models import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=1024, bos_token_id=tokenizer.bos_token_id,
                                      eos_token_id=tokenizer.eos_token_id)
    model = transformers.LlamaForCausalLM(config).eval()
    document = Document("notes.txt", "text", (Page(1, "The keeper is Duncan Hale. The boat is the Morven Lass."),))
    settings = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=24, kernel_size=5)
    session = DocumentSession(_loaded(base_model, tokenizer, model), document, settings, load_template("qa"),
                              generation=GenerationOptions(max_new_tokens=6), share_prefix=False)
    answer = session.ask("Who is the keeper?")
    report = answer.report.to_json()
    if base_model:
        assert answer.prompt.style == "completion" and answer.prompt.template == "qa_base"
        assert answer.prompt.text.startswith("A document, then a question")  # this tokenizer adds no BOS
        assert answer.prompt.text.endswith("Question: Who is the keeper?\n\nAnswer:")
        assert report["stop"]["strings"] == list(BASE_MODEL_STOP.strings)
        assert report["prompt"]["template_name"] == "qa_base" and report["prompt"]["style"] == "completion"
    else:
        assert answer.prompt.style == "chat" and answer.prompt.template == "qa"
        assert "<|im_start|>assistant" in answer.prompt.text
        assert report["stop"]["strings"] == []
        assert report["prompt"]["template_name"] == "qa" and report["prompt"]["style"] == "chat"
    assert report["stop"]["stopped_by"] in {"eos", "max_new_tokens", *BASE_MODEL_STOP.strings}


# --------------------------------------------------------------------------- loops


def first_loop(ids: list[int], rule: RepeatRule) -> int | None:
    """By brute force: the answer's length when its last ``rule.ngram`` tokens first occur (overlaps counted) more
    than ``rule.earlier`` times in it; None if they never do."""
    size = rule.ngram
    for end in range(size, len(ids) + 1):
        tail = ids[end - size:end]
        if sum(ids[start:start + size] == tail for start in range(end - size + 1)) > rule.earlier:
            return end
    return None


def watched(ids: list[int], rule: RepeatRule = LOOP_RULE) -> int | None:
    """The answer's length when the rule's watch first reports a loop, feeding it ``ids`` one at a time."""
    watch = rule.watch()
    for length, token in enumerate(ids, 1):
        looped = watch.add(token)
        if looped is not None:
            assert list(looped) == ids[length - rule.ngram:length]  # the n-gram that looped: the answer's last
            return length
    return None


@pytest.mark.parametrize("lead", [[], [1, 2, 3, 4, 5]])  # the loop from the answer's first token, or later
@pytest.mark.parametrize("period", [LOOP_RULE.ngram, LOOP_RULE.ngram + 7, 2 * LOOP_RULE.ngram + 1])
def test_a_repeated_sentence_ends_once_it_has_come_back_more_than_the_rule_allows(period, lead):
    sentence = list(range(100, 100 + period))
    ids = lead + sentence * 10
    expected = len(lead) + LOOP_RULE.earlier * period + LOOP_RULE.ngram  # the sentence's first n-gram, once too often
    assert watched(ids) == expected == first_loop(ids, LOOP_RULE)


def test_a_run_of_one_token_is_a_loop():
    ids = [1, 2, 3] + [7] * 50
    assert watched(ids) == 3 + LOOP_RULE.ngram + LOOP_RULE.earlier == first_loop(ids, LOOP_RULE)


def test_phrases_shorter_than_the_ngram_may_come_back_any_number_of_times():
    phrase = list(range(100, 100 + LOOP_RULE.ngram - 1))
    ids = [token for index in range(30) for token in (*phrase, 500 + index)]  # every n-gram holds a new token
    assert watched(ids) is None and first_loop(ids, LOOP_RULE) is None


def test_a_small_rule_on_a_mixed_answer_agrees_with_brute_force():
    rule = RepeatRule(ngram=3, earlier=1)
    ids = [5, 6, 7, 8, 5, 6, 9, 6, 7, 8, 1, 5, 6, 7]
    assert watched(ids, rule) == first_loop(ids, rule) == 10  # 6 7 8 comes back at tokens 8-10


def _looping(stop_on_repeat: bool, tokenizer=DigitTokenizer()):
    model = tiny_model("llama")
    settings = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=40, kernel_size=5)
    return generate_answer(model, tokenizer, prompt_ids(150, seed=21)[0].tolist(), settings,
                           GenerationOptions(max_new_tokens=300, stop_at_eos=False, stop_on_repeat=stop_on_repeat))


def test_generation_ends_a_loop_of_the_tiny_model_unless_told_not_to():
    free = _looping(stop_on_repeat=False)
    assert free.stop_reason == "max_new_tokens" and len(free.generated_ids) == 300
    assert free.repeated is None and not free.stop_on_repeat
    end = first_loop(free.generated_ids, LOOP_RULE)
    assert end is not None and end < 300  # this random model does fall into a loop
    looped = _looping(stop_on_repeat=True)
    assert looped.generated_ids == free.generated_ids[:end]
    assert looped.stop_reason == "repetition" and looped.stop_string is None and looped.stop_on_repeat
    assert looped.repeated == DigitTokenizer().decode(free.generated_ids[end - LOOP_RULE.ngram:end])
    assert looped.answer == DigitTokenizer().decode(looped.generated_ids)
    loop = free.generated_ids[end - LOOP_RULE.ngram:end]
    special = frozenset(loop[:1])  # a token of the loop taken for a special token
    marked = _looping(stop_on_repeat=True, tokenizer=DigitTokenizer(special=special))
    assert marked.repeated == DigitTokenizer().decode([token for token in loop if token not in special])
    assert marked.repeated != looped.repeated  # shown as the answer is: without special tokens
