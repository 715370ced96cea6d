"""The docqa task: questions about real documents that ship with Python, checked against the texts themselves.

The oracle here reads the documents on its own (``re.__doc__``, ``pydoc_data.topics``, the install's LICENSE.txt) and
finds the answers with its own patterns; it does not use the task's locating code.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from snapkv_cli.bench import docqa
from snapkv_cli.bench.tasks import TASK_KINDS, PromptShape, docqa_tasks, make_tasks
from snapkv_cli.errors import UserError


def real_text(name: str) -> str:
    if name == "re_docstring":
        return re.__doc__
    if name == "python_license":
        return (Path(sys.base_prefix) / "lib" / "python3.11" / "LICENSE.txt").read_text(encoding="utf-8")
    from pydoc_data.topics import topics

    return topics[name[len("topic_"):]]


def whole_word_count(word: str, text: str) -> int:
    return len(re.findall(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", text, re.IGNORECASE))


def place(question) -> float:
    """The answer's depth, found here: its anchor's (which must occur once), else its only occurrence."""
    text = real_text(question.source)
    if question.anchor is not None:
        assert text.count(question.anchor) == 1, question.anchor
        assert question.answer in question.anchor
        return (text.index(question.anchor) + question.anchor.index(question.answer)) / len(text)
    words = [question.answer] if question.kind == "code" else re.findall(r"[A-Za-z]+", question.answer)
    for word in words:
        assert whole_word_count(word, text) == 1, (question.question, word)
    return text.index(question.answer) / len(text)


def test_at_least_sixty_questions_over_several_documents():
    assert len(docqa.QUESTIONS) >= 60
    per_source = Counter(q.source for q in docqa.QUESTIONS)
    assert set(per_source) == set(docqa.SOURCES) and len(per_source) >= 5
    assert min(per_source.values()) >= 6
    assert len({q.question for q in docqa.QUESTIONS}) == len(docqa.QUESTIONS)


@pytest.mark.parametrize("question", docqa.QUESTIONS, ids=lambda q: f"{q.source}:{q.answer}")
def test_every_answer_is_in_its_document_once_or_at_its_anchor(question):
    text = real_text(question.source)
    assert question.answer in text
    depth = place(question)
    assert docqa.depth(question) == pytest.approx(depth)


@pytest.mark.parametrize("question", docqa.QUESTIONS, ids=lambda q: f"{q.source}:{q.answer}")
def test_the_scorer_accepts_the_answer_and_rejects_a_wrong_one(question, tokenizer, template):
    shape = PromptShape(tokenizer, template, 10 ** 7)
    (task,) = [t for t in docqa_tasks(shape, docqa.SOURCES[question.source].length, 10 ** 3, question.split, 0)
               if t.question == question.question]
    assert task.is_correct(f"The answer is {question.answer}.")
    assert task.is_correct(question.answer.lower())
    assert not task.is_correct("I do not know.")
    if question.kind == "code":
        assert not task.is_correct(f"{question.answer} or {int(question.answer) + 1}")
    else:
        other = next(word for word in question.vocabulary if word.upper() not in {w.upper() for w in task.answers}) \
            if len(question.vocabulary) > len(task.answers) else None
        if other is not None:
            assert not task.is_correct(f"{question.answer} or {other}")
            assert not task.is_correct(other)


def test_depths_cover_the_whole_document_on_the_test_split():
    fifths = Counter(min(4, int(place(q) * 5)) for q in docqa.QUESTIONS if q.split == "test")
    assert set(fifths) == {0, 1, 2, 3, 4}
    assert min(fifths.values()) >= 5


def test_splits_are_disjoint_and_both_hold_questions_at_every_length():
    tune = {q.question for q in docqa.QUESTIONS if q.split == "tune"}
    test = {q.question for q in docqa.QUESTIONS if q.split == "test"}
    assert not tune & test and len(tune | test) == len(docqa.QUESTIONS)
    for length in docqa.lengths():
        for split in ("tune", "test"):
            assert docqa.draw(length, 1000, split), (length, split)
            assert {q.split for q in docqa.draw(length, 1000, split)} == {split}


def test_a_draw_takes_one_question_per_depth_bin_and_depends_on_the_seed():
    pool = sorted((q for q in docqa.QUESTIONS if docqa.SOURCES[q.source].length == 8192 and q.split == "test"),
                  key=lambda q: (place(q), q.question))
    drawn = [docqa.draw(8192, 4, "test", seed) for seed in range(6)]
    for questions in drawn:
        assert len(questions) == 4
        bins = sorted(pool.index(q) * 4 // len(pool) for q in questions)
        assert bins == [0, 1, 2, 3]
    assert docqa.draw(8192, 4, "test", 3) == drawn[3]
    assert len({tuple(q.question for q in questions) for questions in drawn}) > 1
    assert docqa.draw(1024, 4, "test") == []


def test_make_tasks_builds_docqa_tasks_in_document_order(tokenizer, template):
    assert "docqa" in TASK_KINDS
    tasks = docqa_tasks(PromptShape(tokenizer, template, 10 ** 7), 4096, 50, "test", 0)
    assert [t.seed for t in tasks] == [f"test/docqa/4096/{i}/0" for i in range(len(tasks))]
    documents = [t.document for t in tasks]
    assert documents == sorted(documents, key=documents.index)  # one document's questions follow each other
    with pytest.raises(UserError, match="does not fit"):
        make_tasks(tokenizer, "docqa", 4096, 3, template)  # a byte tokenizer: the text is longer than 4096


def test_a_docqa_task_holds_its_question_its_document_and_the_answer_s_place(tokenizer, template):
    """Each task, field by field, from the drawn question and the text read here; the seed chooses the draw."""
    huge = PromptShape(tokenizer, template, 10 ** 7)
    drawn = docqa.draw(8192, 4, "test", 3)
    assert drawn != docqa.draw(8192, 4, "test", 0)  # seed 3 draws other questions than the default seed
    tasks = docqa_tasks(huge, 8192, 4, "test", 3)
    assert len(tasks) == len(drawn) == 4
    for i, (task, question) in enumerate(zip(tasks, drawn)):
        assert (task.kind, task.seed, task.question) == ("docqa", f"test/docqa/8192/{i}/3", question.question)
        assert task.document == real_text(question.source)
        assert task.answers == question.expected and task.answer_kind == question.kind
        assert task.vocabulary == question.vocabulary and task.depth == pytest.approx(place(question))


def test_make_tasks_passes_its_seed_to_the_draw(tokenizer, template, monkeypatch):
    """``make_tasks(seed=...)`` draws docqa's questions and seeds its tasks with that seed. (The byte tokenizer's
    prompts of real documents are several times their bench length, so here every prompt counts as fitting.)"""
    monkeypatch.setattr(PromptShape, "prompt_tokens", lambda self, document, question: 0)
    tasks = make_tasks(tokenizer, "docqa", 8192, 4, template, seed=3)
    assert [task.question for task in tasks] == [question.question for question in docqa.draw(8192, 4, "test", 3)]
    assert [task.seed for task in tasks] == [f"test/docqa/8192/{i}/3" for i in range(4)]


def test_a_document_fits_a_prompt_of_exactly_its_tokens(tokenizer, template):
    """The longest prompt of a draw fits a limit of exactly its tokens; one token less names the document."""
    questions = docqa.draw(4096, 2, "test", 0)
    need = [PromptShape(tokenizer, template, 0).prompt_tokens(real_text(q.source), q.question) for q in questions]
    assert len(docqa_tasks(PromptShape(tokenizer, template, max(need)), 4096, 2, "test", 0)) == 2
    with pytest.raises(UserError) as caught:
        docqa_tasks(PromptShape(tokenizer, template, max(need) - 1), 4096, 2, "test", 0)
    first_too_long = questions[need.index(max(need))].source
    assert str(caught.value) == f"{docqa.SOURCES[first_too_long].title} does not fit a {max(need) - 1:,}-token prompt"


def test_another_text_stops_the_task(monkeypatch):
    source = docqa.SOURCES["re_docstring"]
    docqa.document.cache_clear()
    monkeypatch.setattr(docqa, "_read", lambda name: real_text(name) + " ")
    try:
        with pytest.raises(UserError, match="SHA-256"):
            docqa.document(source.name)
    finally:
        docqa.document.cache_clear()


@pytest.mark.slow
def test_every_document_fits_its_length_with_the_default_model():
    """Real tokenizer: each document's prompt lies within (length / 2, length - answer tokens]."""
    from transformers import AutoTokenizer

    from snapkv_cli.answering.prompting import load_template
    tokenizer = AutoTokenizer.from_pretrained(Path.home() / ".cache/snapkv/models/smollm2-135m-instruct")
    shape = PromptShape(tokenizer, load_template(), 10 ** 7)
    for question in docqa.QUESTIONS:
        length = docqa.SOURCES[question.source].length
        tokens = shape.prompt_tokens(real_text(question.source), question.question)
        assert length // 2 < tokens <= length - docqa.NEW_TOKENS, (question.source, tokens)

