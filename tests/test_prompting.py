"""Tests for snapkv_cli.answering.prompting: templates, token spans, page tags, window report, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapkv_cli.answering.documents import Document, Page
from snapkv_cli.answering.prompting import available_templates, build_prompt, load_template
from snapkv_cli.cli.errors import message as cli_message
from snapkv_cli.errors import PromptTooLong, UserError
from tests.tiny_models import tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
FIELD_NOTES = (ROOT / "examples" / "field_notes.txt").read_text(encoding="utf-8")
QUESTION = "Who is the keeper?"
PAGE_TEXTS = (
    "The lamp was lit at dusk and the wind came round to the north-west.",
    "Duncan Hale repaired the fog signal and oiled the clockwork.",
    "The relief boat Morven Lass arrived with coal, letters and fresh bread.",
)


@pytest.fixture(scope="module")
def qa():
    return load_template("qa")


def three_pages() -> Document:
    return Document("notes.txt", "text", tuple(Page(n, text) for n, text in enumerate(PAGE_TEXTS, start=1)))


def one_page(text: str = FIELD_NOTES) -> Document:
    return Document("notes.txt", "text", (Page(1, text.strip()),))


def decode(tokenizer, ids) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False)


# --------------------------------------------------------------------------- spans


def test_question_is_last_and_in_the_window(tokenizer, qa):
    prompt = build_prompt(tokenizer, three_pages(), QUESTION, qa)
    start, end = prompt.question_span
    assert prompt.document_span[1] <= start < end
    assert decode(tokenizer, prompt.input_ids[start:end]).strip() == QUESTION
    # what follows the question is only the chat template's end of turn and the assistant header
    tail = decode(tokenizer, prompt.input_ids[end:])
    assert tail == "<|im_end|>\n<|im_start|>assistant\n"
    assert start >= prompt.length - 32
    assert prompt.text.endswith(QUESTION + tail)


def test_question_is_stripped(tokenizer, qa):
    prompt = build_prompt(tokenizer, three_pages(), f"  {QUESTION}\n\n", qa)
    assert decode(tokenizer, prompt.input_ids[slice(*prompt.question_span)]).strip() == QUESTION
    assert f"Question: {QUESTION}<|im_end|>" in prompt.text


def test_document_span_decodes_to_the_document(tokenizer, qa):
    for document in (three_pages(), one_page()):
        prompt = build_prompt(tokenizer, document, QUESTION, qa)
        text = decode(tokenizer, prompt.input_ids[slice(*prompt.document_span)])
        assert text.strip() == document.text.strip()


def test_token_pages_follow_the_pages(tokenizer, qa):
    document = three_pages()
    prompt = build_prompt(tokenizer, document, QUESTION, qa)
    start, end = prompt.document_span
    assert len(prompt.token_pages) == prompt.length
    assert all(page is None for page in prompt.token_pages[:start] + prompt.token_pages[end:])
    pages = prompt.token_pages[start:end]
    assert all(page in (1, 2, 3) for page in pages)
    assert pages == sorted(pages)  # pages come in order
    for number, text in enumerate(PAGE_TEXTS, start=1):
        ids = [token for token, page in zip(prompt.input_ids[start:end], pages) if page == number]
        assert decode(tokenizer, ids).strip() == text


def test_token_pages_skip_missing_page_numbers(tokenizer, qa):
    document = Document("report.pdf", "pdf", (Page(2, PAGE_TEXTS[0]), Page(7, PAGE_TEXTS[1])))
    prompt = build_prompt(tokenizer, document, QUESTION, qa)
    assert {page for page in prompt.token_pages if page is not None} == {2, 7}


def test_counts_add_up(tokenizer, qa):
    prompt = build_prompt(tokenizer, three_pages(), QUESTION, qa)
    counts = prompt.counts()
    assert sum(counts.values()) == prompt.length == len(prompt.input_ids)
    assert counts["document"] == prompt.document_span[1] - prompt.document_span[0] > 0
    assert counts["question"] == prompt.question_span[1] - prompt.question_span[0] > 0
    assert counts["template"] > 0
    assert prompt.truncated_document_tokens == 0


def test_window_report(tokenizer, qa):
    prompt = build_prompt(tokenizer, three_pages(), QUESTION, qa)
    question_tokens = prompt.counts()["question"]

    fits = prompt.window_report(32)
    assert fits == {"window_size": 32, "question_tokens_in_window": question_tokens,
                    "question_tokens": question_tokens, "question_fits": True}

    tail = prompt.length - prompt.question_span[1]  # template tokens after the question
    partial = prompt.window_report(tail + 2)
    assert partial["question_tokens_in_window"] == 2
    assert partial["question_fits"] is False

    none = prompt.window_report(4)
    assert none["question_tokens_in_window"] == max(0, 4 - tail)
    assert none["question_fits"] is False

    everything = prompt.window_report(10 * prompt.length)
    assert everything["window_size"] == prompt.length
    assert everything["question_fits"] is True


# --------------------------------------------------------------------------- templates


def test_packaged_templates():
    assert {"qa", "summary"} <= set(available_templates())
    for name in ("qa", "summary"):
        template = load_template(name)
        assert template.name == name
        assert template.system
        assert "{document}" in template.user and template.user.endswith("{question}")
    assert load_template(None) == load_template("qa")


def test_custom_template_path(tmp_path, tokenizer):
    path = tmp_path / "mine.txt"
    path.write_text("Read this:\n{document}\nNow answer: {question}\n", encoding="utf-8")
    template = load_template(str(path))
    assert template.name == "mine" and template.system is None
    prompt = build_prompt(tokenizer, three_pages(), QUESTION, template)
    assert f"Now answer: {QUESTION}<|im_end|>" in prompt.text
    assert "<|im_start|>system" not in prompt.text


def test_system_message_reaches_the_chat_template(tmp_path, tokenizer):
    path = tmp_path / "with_system.txt"
    path.write_text("You are a lighthouse expert.\n---\n{document}\n\nQ: {question}\n", encoding="utf-8")
    template = load_template(str(path))
    assert template.system == "You are a lighthouse expert."
    prompt = build_prompt(tokenizer, three_pages(), QUESTION, template)
    assert prompt.text.startswith("<|im_start|>system\nYou are a lighthouse expert.<|im_end|>\n<|im_start|>user\n")
    assert "---" not in prompt.text


@pytest.mark.parametrize("body", [
    "{document}\n{question}\nAnswer briefly.",   # question not last
    "Answer: {question}",                        # no document
    "{document} {document}\n{question}",         # document twice
    "{question}\n{document}\n{question}",        # question twice
])
def test_bad_template_is_user_error(tmp_path, body):
    path = tmp_path / "bad.txt"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(UserError, match="must contain"):
        load_template(str(path))


def test_unknown_template_lists_available():
    with pytest.raises(UserError) as info:
        load_template("no-such-template")
    message = str(info.value)
    assert "no-such-template" in message and "qa" in message and "summary" in message


def test_the_unknown_template_message_names_every_choice():
    with pytest.raises(UserError) as info:
        load_template("no-such-template")
    assert str(info.value) == ("unknown template 'no-such-template': choose one of qa, qa_base, summary or give a "
                               "path to a .txt template")


def test_the_bad_template_message_says_what_a_template_needs(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("{question}\n{document}", encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_template(str(path))
    assert str(info.value) == ("template 'bad' must contain {document} and {question} once each and end with "
                               "{question} (the question must close the prompt to fall in the observation window)")


def test_only_the_first_separator_line_ends_the_system_message(tmp_path):
    path = tmp_path / "ruled.txt"
    path.write_text("Answer briefly.\n---\n{document}\n---\nQuestion: {question}", encoding="utf-8")
    template = load_template(str(path))
    assert template.system == "Answer briefly."
    assert template.user == "{document}\n---\nQuestion: {question}"


def test_a_template_file_is_read_as_utf8_whatever_the_locale(tmp_path):
    import os
    import subprocess
    import sys

    path = tmp_path / "french.txt"
    path.write_text("Réponds en français.\n---\n« {document} »\nQuestion : {question}", encoding="utf-8")
    code = ("import sys; from snapkv_cli.answering.prompting import load_template; t = load_template(sys.argv[1]); "
            "print(ascii((t.system, t.user)))")
    environment = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}  # an ASCII locale
    result = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, env=environment, capture_output=True,
                            timeout=120)
    assert result.stdout.decode() == ascii(("Réponds en français.", "« {document} »\nQuestion : {question}")) + "\n", \
        result.stderr.decode()[-2000:]


def test_missing_template_file(tmp_path):
    with pytest.raises(UserError, match="template file not found"):
        load_template(str(tmp_path / "missing.txt"))


# --------------------------------------------------------------------------- truncation


@pytest.fixture(scope="module")
def full_length(tokenizer, qa) -> int:
    return build_prompt(tokenizer, one_page(), QUESTION, qa).length


def test_too_long_without_truncate_is_user_error(tokenizer, qa, full_length):
    with pytest.raises(PromptTooLong) as info:
        build_prompt(tokenizer, one_page(), QUESTION, qa, max_tokens=300)
    assert (info.value.tokens, info.value.limit) == (full_length, 300)  # the facts; the CLI names the flags
    text = cli_message(info.value)
    assert f"{full_length} tokens" in text and "300" in text and "--truncate" in text


def test_fits_exactly_needs_no_truncation(tokenizer, qa, full_length):
    prompt = build_prompt(tokenizer, one_page(), QUESTION, qa, max_tokens=full_length)
    assert prompt.length == full_length and prompt.truncated_document_tokens == 0


@pytest.mark.parametrize("how", ["middle", "start", "end"])
def test_truncation(tokenizer, qa, full_length, how):
    document = one_page()
    prompt = build_prompt(tokenizer, document, QUESTION, qa, max_tokens=300, truncate=how)
    assert prompt.length <= 300
    assert prompt.truncated_document_tokens >= full_length - 300
    assert decode(tokenizer, prompt.input_ids[slice(*prompt.question_span)]).strip() == QUESTION
    kept = decode(tokenizer, prompt.input_ids[slice(*prompt.document_span)]).strip()
    original = document.text
    head, tail = original[:40], original[-40:]
    if how == "middle":  # beginning and end kept, the middle dropped
        assert kept.startswith(head) and kept.endswith(tail) and "[...]" in kept
    elif how == "start":  # the beginning dropped, the end kept
        assert not kept.startswith(head) and kept.endswith(tail)
    else:  # the end dropped, the beginning kept
        assert kept.startswith(head) and not kept.endswith(tail)
    assert len(kept) < len(original) / 2
    assert all(page is None for page in prompt.token_pages)  # page tags are only exact untruncated


def test_truncation_when_template_alone_is_too_long(tokenizer, qa):
    with pytest.raises(UserError, match="template and question alone"):
        build_prompt(tokenizer, one_page(), QUESTION, qa, max_tokens=20, truncate="middle")


# --------------------------------------------------------------------------- other


@pytest.mark.parametrize("question", ["", "   \n\t"])
def test_empty_question_is_user_error(tokenizer, qa, question):
    with pytest.raises(UserError) as info:
        build_prompt(tokenizer, three_pages(), question, qa)
    assert str(info.value) == "the question is empty: pass the question as the second argument"


def test_tokenizer_without_chat_template_falls_back_to_plain_text(qa):
    plain = tiny_tokenizer()
    plain.chat_template = None
    document = three_pages()
    prompt = build_prompt(plain, document, QUESTION, qa)
    assert "<|im_start|>" not in prompt.text
    assert prompt.text.startswith(qa.system + "\n\n")
    assert prompt.text.endswith(f"Question: {QUESTION}\n\nAnswer:")
    assert decode(plain, prompt.input_ids[slice(*prompt.question_span)]).strip() == QUESTION
    assert decode(plain, prompt.input_ids[slice(*prompt.document_span)]).strip() == document.text
    assert prompt.question_span[0] >= prompt.length - 32


def test_completion_style_for_base_models_starts_with_the_bos_the_tokenizer_uses(qa):
    from tokenizers.processors import TemplateProcessing

    with_bos = tiny_tokenizer()
    bos_id = with_bos.bos_token_id
    with_bos.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{with_bos.bos_token} $A", special_tokens=[(with_bos.bos_token, bos_id)])
    assert with_bos("a")["input_ids"][0] == bos_id  # this tokenizer starts its encodings with BOS, like Gemma's
    document = three_pages()
    prompt = build_prompt(with_bos, document, QUESTION, qa, completion=True)
    assert prompt.style == "completion" and prompt.template == "qa_base"
    assert prompt.input_ids[0] == bos_id and prompt.input_ids.count(bos_id) == 1
    assert prompt.text.startswith(with_bos.bos_token + load_template("qa_base").system + "\n\n")
    assert prompt.text.endswith(f"Question: {QUESTION}\n\nAnswer:")
    assert decode(with_bos, prompt.input_ids[slice(*prompt.question_span)]).strip() == QUESTION
    assert decode(with_bos, prompt.input_ids[slice(*prompt.document_span)]).strip() == document.text

    plain = tiny_tokenizer()  # no BOS in its encodings: none in the prompt either
    assert build_prompt(plain, document, QUESTION, qa, completion=True).input_ids[0] != plain.bos_token_id
    # a chat model keeps its chat template and the template as given
    chat = build_prompt(plain, document, QUESTION, qa)
    assert chat.style == "chat" and chat.template == "qa" and "<|im_start|>assistant" in chat.text


def test_completion_variant_only_for_packaged_templates_that_have_one(tmp_path):
    from snapkv_cli.answering.prompting import completion_variant

    assert completion_variant(load_template("qa")).name == "qa_base"
    assert completion_variant(load_template("summary")).name == "summary"  # no summary_base: itself
    own = tmp_path / "qa.txt"
    own.write_text("Read this.\n---\n{document}\n\nQ: {question}", encoding="utf-8")
    assert completion_variant(load_template(str(own))).user.startswith("{document}")  # a user's own file is kept


# --------------------------------------------------------------------------- exact spans, pages and prefix


def test_the_document_span_holds_the_document_and_nothing_else(tokenizer, qa):
    document = three_pages()
    prompt = build_prompt(tokenizer, document, QUESTION, qa)
    start, end = prompt.document_span
    assert decode(tokenizer, prompt.input_ids[start:end]) == document.text  # not even the line break before it


def test_an_empty_document_has_an_empty_span(tokenizer, qa):
    prompt = build_prompt(tokenizer, Document("empty.txt", "text", (Page(1, ""),)), QUESTION, qa)
    start, end = prompt.document_span
    assert start == end and prompt.counts()["document"] == 0
    assert sum(prompt.counts().values()) == prompt.length
    assert decode(tokenizer, prompt.input_ids[slice(*prompt.question_span)]).strip() == QUESTION


def test_a_page_s_tokens_spell_that_page_and_the_blank_line_leads_the_next(tokenizer, qa):
    prompt = build_prompt(tokenizer, three_pages(), QUESTION, qa)
    spelled = {number: decode(tokenizer, [token for token, page in zip(prompt.input_ids, prompt.token_pages)
                                          if page == number]) for number in (1, 2, 3)}
    assert spelled == {1: PAGE_TEXTS[0], 2: "\n\n" + PAGE_TEXTS[1], 3: "\n\n" + PAGE_TEXTS[2]}


def test_the_prefix_is_every_token_before_the_question_s_line(tokenizer, qa):
    prompt = build_prompt(tokenizer, three_pages(), QUESTION, qa)
    line_start = prompt.text.rindex("Question: ")
    assert decode(tokenizer, prompt.input_ids[:prompt.prefix_length]) == prompt.text[:line_start]


def test_a_question_of_several_lines_leaves_the_prefix_alone(tokenizer, qa):
    one_line = build_prompt(tokenizer, three_pages(), QUESTION, qa)
    two_lines = build_prompt(tokenizer, three_pages(), f"{QUESTION}\nAnswer with a name.", qa)
    assert two_lines.prefix_length == one_line.prefix_length
    assert two_lines.input_ids[:two_lines.prefix_length] == one_line.input_ids[:one_line.prefix_length]
    assert two_lines.prefix_length <= two_lines.question_span[0]


def test_a_question_on_the_document_s_last_line_starts_the_rest(tmp_path, tokenizer):
    """With no line break between the document and the question, the prefix ends where the question starts: it
    holds the whole document (several lines of it) and nothing of the question."""
    path = tmp_path / "same_line.txt"
    path.write_text("{document} Question: {question}", encoding="utf-8")
    document = one_page("First line of the notes.\nSecond line of the notes.")
    prompts = [build_prompt(tokenizer, document, question, load_template(str(path)))
               for question in (QUESTION, "Where is the lamp?")]
    for prompt in prompts:
        assert prompt.document_span[1] <= prompt.prefix_length == prompt.question_span[0]
    assert prompts[0].input_ids[:prompts[0].prefix_length] == prompts[1].input_ids[:prompts[1].prefix_length]


def test_the_window_report_of_a_prompt_that_is_only_its_question():
    from snapkv_cli.answering.prompting import Prompt

    prompt = Prompt(text="Who is it?", input_ids=[5, 6, 7], document_span=(0, 0), question_span=(0, 3),
                    token_pages=[None] * 3, prefix_length=0)
    assert prompt.window_report(8) == {"window_size": 3, "question_tokens_in_window": 3, "question_tokens": 3,
                                       "question_fits": True}
    assert prompt.window_report(2)["question_tokens_in_window"] == 2


# --------------------------------------------------------------------------- how a document is cut


def word_tokenizer(words: int):
    """One token per space-separated word ``w0`` ... (offsets easy to count by hand), no chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(words)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")


WORDS = " ".join(f"w{i}" for i in range(10))  # ten tokens


@pytest.mark.parametrize("excess, how, kept", [
    (4, "start", "w4 w5 w6 w7 w8 w9"),
    (9, "start", "w9"),
    (4, "end", "w0 w1 w2 w3 w4 w5"),
    (9, "end", "w0"),
    (4, "middle", "w0 w1 w2\n[...]\nw7 w8 w9"),  # six kept: three from the beginning, three from the end
    (3, "middle", "w0 w1 w2\n[...]\nw6 w7 w8 w9"),  # seven kept: the end gets the odd one
    (7, "middle", "w0\n[...]\nw8 w9"),
    (8, "middle", "w0\n[...]\nw9"),
    (9, "middle", "w0\n[...]\n"),  # one kept: the beginning's
])
def test_a_cut_document_keeps_what_is_asked_where_it_is_asked(excess, how, kept):
    from snapkv_cli.answering.prompting import _truncate

    assert _truncate(word_tokenizer(10), WORDS, excess, how, 5) == (kept, 5 + excess)


@pytest.mark.parametrize("how", ["start", "end", "middle"])
def test_a_cut_that_would_leave_no_token_is_a_template_too_long(how):
    from snapkv_cli.answering.prompting import _truncate
    from snapkv_cli.errors import TemplateTooLong

    with pytest.raises(TemplateTooLong):
        _truncate(word_tokenizer(10), WORDS, 10, how, 0)


@pytest.mark.parametrize("how", ["start", "end"])
@pytest.mark.parametrize("text", [FIELD_NOTES, f"<|im_start|>{FIELD_NOTES.strip()}<|im_end|>"],
                         ids=["plain", "framed-by-turn-markers"])
def test_a_truncated_prompt_fills_the_limit_and_reports_what_it_dropped(tokenizer, qa, how, text):
    """Markers the document writes count as the plain text they become in the prompt, at its edges too."""
    document = one_page(text)
    full = build_prompt(tokenizer, document, QUESTION, qa)
    prompt = build_prompt(tokenizer, document, QUESTION, qa, max_tokens=300, truncate=how)
    assert prompt.length == 300  # nothing dropped that would have fitted
    assert prompt.truncated_document_tokens == full.counts()["document"] - prompt.counts()["document"]


@pytest.mark.parametrize("how", ["middle", "start", "end"])
def test_a_document_that_writes_the_unknown_token_is_truncated_to_fit(tokenizer, qa, how):
    """The unknown token's text (``<|endoftext|>`` here) is one token in the prompt, as the tokenizer makes it: the
    cut counts it as the prompt does, so the prompt fits."""
    text = "Notes. " + "<|endoftext|>" * 400 + " The end."
    prompt = build_prompt(tokenizer, one_page(text), QUESTION, qa, max_tokens=200, truncate=how)
    assert 200 - 16 <= prompt.length <= 200
    assert decode(tokenizer, prompt.input_ids[slice(*prompt.question_span)]).strip() == QUESTION
