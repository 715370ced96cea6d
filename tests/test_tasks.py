"""The task generator in detail: what each task's document says and asks, where its needles sit, how its prose fills
the prompt (counted exactly with a one-token-per-byte tokenizer), and that a seed keeps naming the same sample."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapkv_cli.bench import haystack
from snapkv_cli.bench import tasks as tasks_module
from snapkv_cli.bench.tasks import _KEYS, TASKS, VARIABLES, PromptShape, make_tasks, task_seed
from snapkv_cli.errors import UserError
from tests.tiny_models import CHAT_TEMPLATE

ROOT = Path(__file__).resolve().parent.parent


def make_byte_tokenizer():
    """One token per UTF-8 byte (a byte-level BPE without merges) and the tiny chat template: token counts add up
    exactly, so a test can size a prompt to the token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={byte: i for i, byte in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                        unk_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def byte_tokenizer():
    return make_byte_tokenizer()


# -- what a task says and asks -------------------------------------------------------------------------------------

# The needle sentences each task writes, and the question it asks ({} is the door's colour or the chain's value).
NEEDLE = {
    "single_needle": r"The secret pass code is (\d{5})\.",
    "question_first": r"The secret pass code is (\d{5})\.",
    "multi_key": r"The pass code for the (\w+) door is (\d{5})\.",
    "multi_value": r"One of the pass codes for the (\w+) door is (\d{5})\.",
    "variable_tracking": r"VAR ([A-Z]+) = (\d{5}|VAR [A-Z]+)\.",
}
QUESTION = {
    "single_needle": "What is the secret pass code? Answer with the number.",
    "question_first": "Answer the question asked at the start of the document.",
    "multi_key": "What is the pass code for the {} door? Answer with the number.",
    "multi_value": "What are all the pass codes for the {} door? Answer with the numbers.",
    "variable_tracking": ("Which variables are assigned the value {}, directly or through another variable? "
                          "Answer with their names."),
}
QUESTION_FIRST_HEAD = "Question: What is the secret pass code? Answer with the number."


def needles_and_prose(task) -> tuple[list[tuple[int, tuple[str, ...]]], list[str]]:
    """The needles (index among the prose paragraphs before it, regex groups) and the prose paragraphs."""
    needles, prose = [], []
    paragraphs = task.document.split("\n\n")
    if task.kind == "question_first":
        assert paragraphs[0] == QUESTION_FIRST_HEAD
        paragraphs = paragraphs[1:]
    for paragraph in paragraphs:
        match = re.fullmatch(NEEDLE[task.kind], paragraph)
        if match:
            needles.append((len(prose), match.groups()))
        else:
            prose.append(paragraph)
    return needles, prose


def resolve(assignments: dict[str, str], name: str) -> str:
    """The value a variable holds, following ``VAR X = VAR Y`` back to a number."""
    value = assignments[name]
    return resolve(assignments, value[4:]) if value.startswith("VAR ") else value


@pytest.mark.parametrize("kind", list(TASKS))
def test_each_task_asks_for_exactly_what_its_needles_say(tokenizer, template, kind):
    """Read back from the document alone: the needles, the question's door or value, and from them the answers, the
    distractors and the codes; every task carries its kind, its seed and the depth its needle was placed at, and
    the needle (the asked one, or one of several values) sits there among the prose paragraphs."""
    samples = make_tasks(tokenizer, kind, 4000, 3, template, seed=5)
    for sample, (task, depth) in enumerate(zip(samples, (0.05, 0.5, 0.95))):
        assert task.kind == kind and task.seed == task_seed("test", kind, 4000, sample, 5)
        assert task.depth == pytest.approx(depth)
        needles, prose = needles_and_prose(task)
        where = {groups: before / len(prose) for before, groups in needles}
        tolerance = (len(needles) + 1) / len(prose)
        if kind in ("single_needle", "question_first"):
            ((code,),) = where
            assert task.question == QUESTION[kind]
            assert task.answers == task.codes == (code,) and task.distractors == ()
            asked = (code,)
        elif kind == "multi_key":
            colours = [colour for colour, _ in where]
            assert len(where) == 4 and len(set(colours)) == 4 and set(colours) <= set(_KEYS)
            (asked,) = [(colour, code) for colour, code in where if task.question == QUESTION[kind].format(colour)]
            assert task.answers == (asked[1],)
            assert sorted(task.distractors) == sorted(code for colour, code in where if (colour, code) != asked)
            assert sorted(task.codes) == sorted(code for _, code in where)
        elif kind == "multi_value":
            ((colour, _), *_) = where
            assert len(where) == 3 and {c for c, _ in where} == {colour} and colour in _KEYS
            assert task.question == QUESTION[kind].format(colour)
            assert task.answers == task.codes == tuple(code for _, code in where) and task.distractors == ()
            asked = None
        else:
            assignments = dict(where.keys())
            assert len(assignments) == 4 and set(assignments) <= set(VARIABLES)
            value = re.search(r"value (\d{5})", task.question)[1]
            assert task.question == QUESTION[kind].format(value)
            chain = [name for name in assignments if resolve(assignments, name) == value]
            assert task.answers == tuple(chain) and len(chain) == 3  # in the document's order: the chain's order
            (decoy,) = set(assignments) - set(chain)
            assert task.distractors == (decoy,) and task.codes == (value, assignments[decoy])
            assert task.answer_kind == "name" and task.vocabulary == VARIABLES
            answer = f"{chain[0].lower()}, VAR {chain[1]} and {chain[2].title()}"
            assert task.extracted(answer) == sorted(chain) and task.is_correct(answer)
            asked = None
        if asked is not None:  # the asked needle at the depth
            assert where[asked] == pytest.approx(depth, abs=tolerance), (sample, where, len(prose))
        else:  # one of the needles at the depth, the others elsewhere
            assert min(abs(at - depth) for at in where.values()) <= tolerance, (sample, where, len(prose))
        if kind != "variable_tracking":
            assert task.extracted(f"It is {task.answer}.") == sorted(task.answers)


def test_make_tasks_spreads_depths_from_5_to_95_percent_and_checks_the_split(tokenizer, template):
    assert [t.depth for t in make_tasks(tokenizer, "single_needle", 500, 2, template)] == pytest.approx([0.05, 0.95])
    assert [t.depth for t in make_tasks(tokenizer, "single_needle", 500, 1, template)] == pytest.approx([0.05])
    with pytest.raises(ValueError, match=r"^split must be one of test, tune, got 'train'$"):
        make_tasks(tokenizer, "single_needle", 500, 1, template, split="train")


def test_published_samples_regenerate_from_their_seeds(tokenizer, template):
    """docs/results/accuracy_headline_4k.json names each sample by its seed and records its depth and expected code:
    the generator still makes exactly those samples (the codes and depths do not depend on the prompt's size)."""
    report = json.loads((ROOT / "docs" / "results" / "accuracy_headline_4k.json").read_text())
    plan = report["plan"]
    published = {o["sample"]: o for o in report["outcomes"]}
    assert task_seed("test", "single_needle", 4096, 0) == published[0]["seed"]  # seed 0 is the default
    (kind,), (length,) = plan["tasks"], plan["lengths"]
    tasks = make_tasks(tokenizer, kind, length, plan["samples"], template, max_prompt_tokens=300,
                       split=plan["split"], seed=plan["seed"])
    assert len(tasks) == len(published) == 40
    for sample, task in enumerate(tasks):
        outcome = published[sample]
        assert (task.seed, list(task.answers)) == (outcome["seed"], outcome["expected"])
        assert task.depth == pytest.approx(outcome["depth"]) and task.answers[0] in task.document


def synthetic_pool(monkeypatch, count: int = 30) -> None:
    """Both splits' pools replaced by ``count`` numbered paragraphs of equal length (the shuffle still draws from the
    task's rng): independent of the Python version's documentation topics."""
    pool = tuple(f"Paragraph {i:02d} is plain filler prose without any sentence break inside" for i in range(count))
    monkeypatch.setattr(haystack, "split_paragraphs", lambda split: pool)


# For seed 0, sample 0 of each task at 1200 byte-tokens: the codes, the answers, the distractors, and the numbers of
# the first five paragraphs drawn. Reports (and merged reports) name their samples by seed only: a change here
# changes every sample.
PINNED = {
    "single_needle": (("18605",), ("18605",), (), [26, 13, 25, 10, 28]),
    "multi_key": (("31671", "40689", "24429", "59525"), ("31671",), ("40689", "24429", "59525"), [29, 26, 6, 2, 14]),
    "multi_value": (("36229", "55221", "54867"), ("36229", "55221", "54867"), (), [20, 17, 25, 27, 14]),
    "variable_tracking": (("61119", "90305"), ("DELTA", "CEDAR", "IONIC"), ("BRAVO",), [3, 10, 2, 19, 1]),
    "question_first": (("19102",), ("19102",), (), [11, 21, 8, 5, 27]),
}


@pytest.mark.parametrize("kind", list(TASKS))
def test_a_seed_names_the_same_sample_in_every_version(monkeypatch, byte_tokenizer, template, kind):
    synthetic_pool(monkeypatch)
    (task,) = make_tasks(byte_tokenizer, kind, 1200, 1, template)
    drawn = [int(p.split()[1]) for p in task.document.split("\n\n") if p.startswith("Paragraph ")][:5]
    assert (task.codes, task.answers, task.distractors, drawn) == PINNED[kind]


# -- codes and needle placement ------------------------------------------------------------------------------------

class EndsFirst(random.Random):
    """A seeded rng whose first ``randint`` draws are the ends of the range asked for ("low" or "high")."""

    def __init__(self, ends: list[str]):
        super().__init__(0)
        self.ends = list(ends)

    def randint(self, a: int, b: int) -> int:
        return (a if self.ends.pop(0) == "low" else b) if self.ends else super().randint(a, b)


@pytest.mark.parametrize(("split", "lowest", "highest"), [("tune", "10000", "99996"), ("test", "10001", "99999")])
def test_codes_are_distinct_five_digit_numbers_of_their_split(split, lowest, highest):
    """Distinct codes (3,000 draws repeat some numbers), all of 5 digits, multiples of 4 for tune and none for test;
    the ends of the 5-digit range are codes too: 10000 for tune, 99999 for test."""
    codes = tasks_module._codes(random.Random(0), 3000, split)
    assert len(set(codes)) == 3000
    assert all(re.fullmatch(r"[1-9]\d{4}", code) for code in codes)
    assert all((int(code) % 4 == 0) == (split == "tune") for code in codes)
    assert min(codes) >= lowest and max(codes) <= highest
    ends = tasks_module._codes(EndsFirst(["low", "high", "low", "high"]), 2, split)
    assert ends[0] == ("10000" if split == "tune" else "99999") and re.fullmatch(r"[1-9]\d{4}", ends[1]), ends
    assert len(set(ends)) == 2


@settings(max_examples=300, deadline=None)
@given(paragraphs=st.integers(0, 12),
       depths=st.lists(st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.31, 0.5, 0.52, 0.9, 0.95, 1.0]), min_size=1,
                       max_size=5))
def test_needles_sit_at_their_depths_in_order(paragraphs, depths):
    """Each sentence goes in at its depth (a fraction of the paragraphs, within the other sentences' count), the
    paragraphs keep their order, and the sentences come in order of depth, equal depths in the order given (a
    variable chain must read in order)."""
    prose = [f"p{i}" for i in range(paragraphs)]
    sentences = [f"s{9 - i}" for i in range(len(depths))]  # their text sorts against their order
    placed = tasks_module._insert(prose, sentences, depths)
    assert [p for p in placed if p.startswith("p")] == prose
    order = sorted(range(len(depths)), key=lambda i: (depths[i], i))
    assert [p for p in placed if p.startswith("s")] == [sentences[i] for i in order]
    for i, depth in enumerate(depths):
        before = placed.index(sentences[i]) - sum(1 for j in range(len(depths)) if placed.index(sentences[j])
                                                  < placed.index(sentences[i]))
        assert abs(before - depth * paragraphs) <= 0.5 + len(depths), (placed, depths)


# -- filling the prompt (one token per byte: counts are exact) ------------------------------------------------------

QUESTION_TEXT = "What is the secret pass code?"
NEEDLE_TEXT = "The secret pass code is 12345."


def sentence(label: str, length: int) -> str:
    """A sentence of exactly ``length`` bytes, ending in a full stop."""
    return (label + " " + "x" * length)[: length - 1] + "."


def block(label: str, length: int) -> str:
    """A paragraph of exactly ``length`` bytes without a sentence break."""
    return (label + " " + "y" * length)[:length]


class CountingShape(PromptShape):
    """A :class:`PromptShape` that records every text whose tokens were counted (and may undercount them)."""

    def __init__(self, *args, undercount: int = 0):
        super().__init__(*args)
        object.__setattr__(self, "counted", [])
        object.__setattr__(self, "undercount", undercount)

    def tokens(self, text: str) -> int:
        self.counted.append(text)
        return super().tokens(text) - self.undercount


def fill(monkeypatch, byte_tokenizer, template, pool: list[str], room: int, *, needle: str = NEEDLE_TEXT,
         undercount: int = 0) -> tuple[list[str], CountingShape]:
    """The prose ``_document`` writes around one needle when the prompt leaves ``room`` tokens for it, drawing the
    paragraphs of ``pool`` in that order."""
    monkeypatch.setattr(tasks_module, "shuffled_paragraphs", lambda split, rng: list(pool))
    base = PromptShape(byte_tokenizer, template, 0).prompt_tokens(needle, QUESTION_TEXT)
    shape = CountingShape(byte_tokenizer, template, base + room, undercount=undercount)
    document = tasks_module._document(shape, random.Random(0), "test", [needle], [0.5], QUESTION_TEXT)
    assert shape.prompt_tokens(document, QUESTION_TEXT) <= shape.max_prompt_tokens
    prose = [p for p in document.split("\n\n") if p != needle]
    assert len(prose) == len(document.split("\n\n")) - 1
    return prose, shape


def test_whole_paragraphs_fill_the_room_to_the_last_token(monkeypatch, byte_tokenizer, template):
    """A paragraph costs its tokens plus the blank line before the next; one that fits exactly is taken, one that
    does not fit is skipped and a shorter one after it taken."""
    a, too_long, b = block("A", 100), block("L", 300), block("B", 50)
    prose, _ = fill(monkeypatch, byte_tokenizer, template, [a, too_long, b], 102 + 52)
    assert prose == [a, b]


@pytest.mark.parametrize("sentences", [2, 3, 4, 5])
def test_the_first_sentences_of_a_skipped_paragraph_fill_what_remains(monkeypatch, byte_tokenizer, template,
                                                                      sentences):
    """No whole paragraph fits: the longest head (first k sentences) of the first skipped one that fits is taken,
    counted exactly, for every k short of the whole paragraph."""
    parts = [sentence(f"S{i}", 30 + 7 * i) for i in range(sentences)]
    paragraph = " ".join(parts)
    for k in range(1, sentences):
        head = " ".join(parts[:k])
        for room in (len(head) + 2, len(head) + 2 + len(parts[k])):  # exactly, and one byte short of the next head
            prose, _ = fill(monkeypatch, byte_tokenizer, template, [paragraph, block("Z", 900)], room)
            assert prose == [head], (k, room)


def test_the_fill_goes_on_while_24_tokens_are_left(monkeypatch, byte_tokenizer, template):
    """With exactly 24 tokens left the fill goes on: a 22-byte paragraph drawn next is taken, and so is a 22-byte
    first sentence of a skipped paragraph."""
    a, small = block("A", 200), block("B", 22)
    prose, _ = fill(monkeypatch, byte_tokenizer, template, [a, small], 202 + 24)
    assert prose == [a, small]
    long = sentence("H", 22) + " " + sentence("T", 400)
    prose, _ = fill(monkeypatch, byte_tokenizer, template, [a, long], 202 + 24)
    assert prose == [a, sentence("H", 22)]


def test_the_fill_stops_drawing_once_fewer_than_24_tokens_are_left(monkeypatch, byte_tokenizer, template):
    """Below 24 tokens left, the rest of the pool is not even counted (it may be thousands of paragraphs): a 10-byte
    paragraph or first sentence that would fit the sliver stays out."""
    a, sliver = block("A", 200), block("C", 10)
    prose, shape = fill(monkeypatch, byte_tokenizer, template, [a, sliver], 202 + 23)
    assert prose == [a] and not any(text.startswith("C") for text in shape.counted)
    first = sentence("H", 40) + " " + sentence("T", 400)
    later = sentence("C", 10) + " " + sentence("U", 400)
    prose, shape = fill(monkeypatch, byte_tokenizer, template, [first, later], 42 + 23)
    assert prose == [sentence("H", 40)] and sentence("C", 10) + "\n\n" not in shape.counted


@pytest.mark.parametrize(("room", "left", "enough"), [(1000, 64, True), (1000, 65, False), (2100, 105, True),
                                                      (2100, 106, False)])
def test_a_pool_too_small_for_the_prompt_is_a_user_error(monkeypatch, byte_tokenizer, template, room, left, enough):
    """The prose may leave up to 64 tokens or 5% of the room unfilled; more is an error that says what to do."""
    paragraph = block("P", room - left - 2)
    if enough:
        prose, _ = fill(monkeypatch, byte_tokenizer, template, [paragraph], room)
        assert prose == [paragraph]
        return
    with pytest.raises(UserError) as error:
        fill(monkeypatch, byte_tokenizer, template, [paragraph], room)
    base = PromptShape(byte_tokenizer, template, 0).prompt_tokens(NEEDLE_TEXT, QUESTION_TEXT)
    assert str(error.value) == (f"the test prose holds {room - left:,} tokens, not enough for a {base + room:,}-token "
                                "prompt: ask for shorter prompts")


def test_needles_that_alone_exceed_the_prompt_are_a_user_error(monkeypatch, byte_tokenizer, template):
    needle = "The secret pass code is 12345. " + "z" * 1200
    with pytest.raises(UserError) as error:
        fill(monkeypatch, byte_tokenizer, template, [block("A", 100)], -1, needle=needle)
    limit = PromptShape(byte_tokenizer, template, 0).prompt_tokens(needle, QUESTION_TEXT) - 1
    assert limit > 1000 and str(error.value) == f"the template, question and needles alone exceed {limit:,} tokens"


def test_the_prompt_is_measured_and_trimmed_when_the_pieces_undercount(monkeypatch, byte_tokenizer, template):
    """Where a tokenizer counts a paragraph on its own as fewer tokens than it takes in the prompt, the last
    paragraphs are dropped until the measured prompt fits."""
    a, b, c = block("A", 100), block("B", 100), block("C", 100)
    prose, _ = fill(monkeypatch, byte_tokenizer, template, [a, b, c], 3 * 102 - 5, undercount=10)
    assert prose == [a, b]
