"""``DocumentSession``'s contract beyond "the same answer as a separate run": what it reports, what it tells the
user while it works, which options reach generation, and how it fails. Each test reads an observable effect (the
report, the progress messages, the error's fields, the document cache's entry), not the session's bookkeeping.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import PretrainedConfig

import snapkv_cli.answering.session as pipeline
from snapkv_cli.answering.documents import Document, Page
from snapkv_cli.doc_cache import DocCache
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.errors import PromptTooLong, UserError
from snapkv_cli.generation import GenerationOptions
from snapkv_cli.generation.stopping import BASE_MODEL_STOP
from tests.helpers import recorded_forwards, recording_presenter

pytestmark = pytest.mark.usefixtures("one_thread")

DOCUMENT = Document("notes.txt", "text", (Page(1, "The lamp was lit at dusk. Duncan Hale oiled the clockwork. "
                                                  "The coastguard code is K-4417, painted on the oil store. " * 4),))
SNAPKV = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=48)
H2O = CompressionSettings(method="h2o", window_size=8, max_capacity_prompt=48)
FOUR = GenerationOptions(max_new_tokens=4)


@pytest.fixture
def session(template):
    """A session factory: ``session(loaded, settings=SNAPKV, **options)``, four new tokens unless told."""

    def make(loaded, settings=SNAPKV, **options):
        options.setdefault("generation", FOUR)
        return pipeline.DocumentSession(loaded, DOCUMENT, settings, template, **options)

    return make


def test_progress_names_each_step_and_counts_layers_and_tokens(loaded, tmp_path, session):
    """Each step is told with its token count; the prefills advance once per layer (one pass here), the answer once
    per token."""
    layers = loaded.model.config.num_hidden_layers
    cache = DocCache(tmp_path)
    presenter = recording_presenter()
    answer = session(loaded, doc_cache=cache, progress=presenter).ask("What is the code?")
    prefix, question = answer.prompt.prefix_length, answer.prompt.length - answer.prompt.prefix_length
    tokens = len(answer.result.generated_ids)
    answering = ["phase", "Answering: up to 4 tokens", 4, "tokens", tokens]
    assert presenter.events == [
        ("progress", f"Loading the document's cache ({prefix} tokens)..."),
        ["phase", f"Reading the document: {prefix} tokens", layers, "layers", layers],
        ("progress", "Saving the document's cache..."),
        ["phase", f"Prefill: {question} tokens after the {prefix}-token prefix", layers, "layers", layers],
        answering]

    presenter = recording_presenter()  # a new session finds the prefix on disk: nothing to read or save
    session(loaded, doc_cache=cache, progress=presenter).ask("What is the code?")
    assert presenter.events == [
        ("progress", f"Loading the document's cache ({prefix} tokens)..."),
        ["phase", f"Prefill: {question} tokens after the {prefix}-token prefix", layers, "layers", layers],
        answering]

    presenter = recording_presenter()  # one question, nothing kept: the whole prompt in one pass
    alone = session(loaded, share_prefix=False, progress=presenter).ask("What is the code?")
    assert presenter.events == [["phase", f"Prefill: {alone.prompt.length} tokens", layers, "layers", layers],
                                answering]


def test_a_chunked_prefill_advances_per_layer_and_chunk(loaded, session):
    layers = loaded.model.config.num_hidden_layers
    presenter = recording_presenter()
    answer = session(loaded, share_prefix=False, progress=presenter,
                     generation=dataclasses.replace(FOUR, prefill_chunk=16)).ask("What is the code?")
    chunks = -(-answer.prompt.length // 16)
    assert chunks > 2
    assert presenter.events[0] == ["phase", f"Prefill: {answer.prompt.length} tokens", layers * chunks, "layers",
                                   layers * chunks]


def test_the_report_names_the_model_and_times_within_the_wall_clock(loaded, session):
    described = dataclasses.replace(loaded, dtype_reason="auto: the test's reason", quantization="int8")
    started = time.perf_counter()
    answer = session(described).ask("Who oiled the clockwork?")
    elapsed = time.perf_counter() - started
    report = answer.report
    assert (report.model, report.device, report.dtype) == (loaded.name, "cpu", "float32")
    assert (report.dtype_reason, report.quantization) == ("auto: the test's reason", "int8")
    timings = report.timings
    # the wall time holds the prefill and the decoding and is part of this call (each rounded to 1 ms)
    assert 0 < timings.prefill_s + timings.decode_s <= timings.wall_s + 0.002 and timings.wall_s <= elapsed + 0.001
    assert report.prefix.source == "prefill" and report.prefix.tokens == answer.prompt.prefix_length
    assert 0 < report.prefix.seconds <= elapsed  # the prefix's own prefill: part of this call, never more

    alone = session(loaded, share_prefix=False).ask("Who oiled the clockwork?")
    assert alone.report.prefix.tokens == alone.prompt.prefix_length and alone.report.prefix.seconds == 0.0


def test_the_document_cache_reports_the_bytes_it_stored_or_refused(loaded, tmp_path, session):
    stored = session(loaded, doc_cache=DocCache(tmp_path / "roomy")).ask("What is the code?")
    session_prefix = stored.prompt.input_ids[:stored.prompt.prefix_length]
    info = stored.report.doc_cache
    assert info.status == "stored" and info.bytes > 0

    refusing = session(loaded, doc_cache=DocCache(tmp_path / "tiny", max_bytes=1))
    refused = refusing.ask("What is the code?")
    state = refusing.prefix.cache.prefix_state().tensors().values()
    expected = sum(t.numel() * t.element_size() for t in state) + 8 * len(session_prefix)  # and the int64 token ids
    assert refused.report.doc_cache.status == "not_stored" and refused.report.doc_cache.bytes == expected
    assert info.bytes == Path(info.path).stat().st_size  # what the entry takes on disk


def test_a_prefix_loaded_from_disk_serves_the_next_question_from_memory(loaded, tmp_path, session):
    cache = DocCache(tmp_path)
    session(loaded, doc_cache=cache).ask("What is the code?")
    reader = session(loaded, doc_cache=cache)
    sources = [reader.ask(question).report.prefix.source for question in ("What is the code?", "Who oiled it?")]
    assert sources == ["disk", "memory"]


def test_a_prefix_with_attention_sums_is_not_served_to_a_session_without_them(loaded, tmp_path, session):
    cache = DocCache(tmp_path)
    with_sums = session(loaded, H2O, doc_cache=cache).ask("What is the code?")
    assert with_sums.report.doc_cache.status == "stored"
    without = session(loaded, SNAPKV, doc_cache=cache, attention_sums=False).ask("What is the code?")
    assert without.report.prefix.source == "prefill" and without.report.doc_cache.status == "stored"
    assert session(loaded, SNAPKV, attention_sums=True).attention_sums is True  # asked for: kept


GROWN = Document("notes.txt", "text", (Page(1, DOCUMENT.pages[0].text + " The relief boat is the Morven Lass."),))


def test_a_session_continued_from_an_earlier_prefix_prefills_only_what_is_new(loaded, template, session):
    """A document that grew (a conversation's next turn), built on the prefix of the one before: the tokens they
    start with alike, less a window, are taken, the rest prefilled, and the answer and every layer's kept positions
    are those of a session that read it all."""
    earlier = session(loaded)
    earlier.ask("What is the code?")
    held = [tensor.clone() for tensor in earlier.prefix.cache.prefix_state().tensors().values()]
    presenter = recording_presenter()
    continued = pipeline.DocumentSession(loaded, GROWN, SNAPKV, template, generation=FOUR, progress=presenter)
    continued.continue_from(earlier.prefix)
    with recorded_forwards(loaded.model) as forwards:
        answer = continued.ask("What is the boat?")
    fresh = pipeline.DocumentSession(loaded, GROWN, SNAPKV, template, generation=FOUR).ask("What is the boat?")
    prefix = answer.prompt.prefix_length
    common = pipeline.common_start(earlier.prefix.ids, answer.prompt.input_ids[:prefix])
    assert 0 < common < len(earlier.prefix.ids)  # the template's end after the document differs
    taken = common - SNAPKV.window_size
    assert answer.report.prefix.extended_tokens == taken == answer.report.reused_prefix_tokens
    assert fresh.report.prefix.extended_tokens == 0 and answer.report.prefix.source == "prefill"
    assert forwards[0] == (taken, prefix - taken)  # the model read only the tokens past what was taken
    phase = f"Reading the document: {prefix - taken} tokens after {taken} already read"
    assert phase in [event[1] for event in presenter.events if event[0] == "phase"]
    assert answer.result.generated_ids == fresh.result.generated_ids
    for layer, record in answer.result.cache.records.items():
        assert torch.equal(record.kept_positions, fresh.result.cache.records[layer].kept_positions), f"layer {layer}"
    assert all(torch.equal(a, b) for a, b in zip(held, earlier.prefix.cache.prefix_state().tensors().values()))
    again = continued.ask("What is the code?").report.prefix  # its own prefix from now on
    assert again.source == "memory" and again.extended_tokens == 0


def test_an_earlier_prefix_with_the_same_tokens_is_cut_a_window_short(loaded, template, session):
    """The same document under another name (its prefix's tokens alike to the last): the last window is read again,
    its queries made anew, rather than nothing prefilled."""
    earlier = session(loaded)
    first = earlier.ask("What is the code?")
    renamed = pipeline.DocumentSession(loaded, dataclasses.replace(DOCUMENT, source="copy.txt"), SNAPKV, template,
                                       generation=FOUR)
    renamed.continue_from(earlier.prefix)
    answer = renamed.ask("What is the code?")
    assert answer.report.prefix.extended_tokens == len(earlier.prefix.ids) - SNAPKV.window_size
    assert answer.result.generated_ids == first.result.generated_ids


def test_how_much_of_an_earlier_prefix_is_taken_follows_their_common_start(loaded, session):
    """Tokens alike up to one window past the cut: one token taken; up to the window exactly: none."""
    earlier = session(loaded)
    earlier.ask("What is the code?")
    ids, window = earlier.prefix.ids, SNAPKV.window_size
    later = session(loaded)
    for common, taken in ((window + 1, 1), (window, 0)):
        other = [*ids[:common], (ids[common] + 1) % 90, *ids[common + 1:]]
        later.continue_from(dataclasses.replace(earlier.prefix, ids=other))
        tokens, head = later._earlier_head(ids)
        assert tokens == taken and (head is None) == (taken == 0)
        assert head is None or head.get_seq_length() == taken


def test_an_earlier_prefix_with_a_shorter_window_is_not_taken(loaded, template, session):
    """A prefix keeps its window's queries: a session with a longer window cannot build on it."""
    earlier = session(loaded)
    earlier.ask("What is the code?")
    wider = dataclasses.replace(SNAPKV, window_size=2 * SNAPKV.window_size)
    continued = pipeline.DocumentSession(loaded, GROWN, wider, template, generation=FOUR)
    continued.continue_from(earlier.prefix)
    assert continued.ask("What is the boat?").report.prefix.extended_tokens == 0


def test_an_earlier_prefix_is_taken_whole_when_the_new_one_starts_with_it(loaded, session):
    earlier = session(loaded)
    earlier.ask("What is the code?")
    longer = session(loaded)
    longer.continue_from(pipeline.SharedPrefix(earlier.prefix.ids[:-5], earlier.prefix.cache.head(
        len(earlier.prefix.ids) - 5), "prefill", 0.0, earlier.prefix.doc_cache))
    answer = longer.ask("What is the code?")
    assert answer.report.prefix.extended_tokens == len(earlier.prefix.ids) - 5
    assert answer.result.generated_ids == earlier.ask("What is the code?").result.generated_ids


def test_an_earlier_prefix_of_other_settings_or_with_sums_cut_short_is_not_taken(loaded, template, session):
    earlier = session(loaded, H2O)
    earlier.ask("What is the code?")
    for settings in (SNAPKV, H2O):  # without attention sums: other settings; with them: cannot be cut
        continued = pipeline.DocumentSession(loaded, GROWN, settings, template, generation=FOUR)
        continued.continue_from(earlier.prefix)
        assert continued.ask("What is the boat?").report.prefix.extended_tokens == 0


def test_a_failed_prefix_leaves_the_session_usable(loaded, session, monkeypatch):
    reader = session(loaded)
    prompt = reader.build_prompt("What is the code?")
    reader.prepare(prompt)

    def failing(prefix_ids):
        raise OSError("disk gone")

    with monkeypatch.context() as patch:
        patch.setattr(reader, "_obtain", failing)
        with pytest.raises(OSError):  # another prefix: the old one goes, the new one fails
            reader.prepare(dataclasses.replace(prompt, prefix_length=prompt.prefix_length - 1))
    assert reader.ask("What is the code?").report.prefix.source == "prefill"


def test_ask_tells_its_progress_and_select_decodes_nothing(loaded, template, session):
    from snapkv_cli.progress import Progress

    class Told(Progress):
        def __init__(self):
            self.phases, self.pieces = [], []

        def phase(self, name, total, unit):
            self.phases.append(name)

        def text(self, chunk):
            self.pieces.append(chunk)

    told = Told()
    answer = pipeline.ask(loaded, DOCUMENT, "What is the code?", SNAPKV, template, generation=FOUR, progress=told)
    assert told.phases[0].startswith("Prefill") and answer.result.generated_ids
    assert "".join(told.pieces).strip() == answer.result.answer.strip()

    seen = Told()
    selected = pipeline.select(loaded, DOCUMENT, "What is the code?", SNAPKV, template, generation=FOUR,
                               progress=seen)
    assert seen.phases == told.phases[:1] and seen.pieces == []  # select passes ask's options on, decodes nothing
    assert selected.result.generated_ids == [] and selected.prompt.input_ids == answer.prompt.input_ids
    assert selected.result.cache.records.keys() == answer.result.cache.records.keys()
    for layer, record in answer.result.cache.records.items():
        assert selected.result.cache.records[layer].kept_positions.equal(record.kept_positions)
    assert session(loaded).ask("What is the code?", generate=False).result.generated_ids == []


def test_a_base_model_gets_the_completion_prompt_and_the_stop_rule(loaded, template, session):
    from snapkv_cli.answering.prompting import build_prompt

    base = dataclasses.replace(loaded, base_model=True)
    assert session(base).generation.stop_strings == BASE_MODEL_STOP.strings
    mine = GenerationOptions(max_new_tokens=4, stop_strings=("END",))
    assert session(base, generation=mine).generation.stop_strings == ("END",)  # the caller's rule stands
    assert session(loaded).generation.stop_strings == ()  # an instruction-tuned model ends its answers itself
    prompt = session(base).build_prompt("What is the code?")
    assert prompt.input_ids == build_prompt(base.tokenizer, DOCUMENT, "What is the code?", template,
                                            completion=True).input_ids
    assert prompt.input_ids != session(loaded).build_prompt("What is the code?").input_ids


def test_a_sliding_window_model_prefills_in_its_default_chunks(loaded, session, monkeypatch):
    from snapkv_cli.models.catalog import SLIDING_PREFILL_CHUNK, default_prefill_chunk

    assert session(loaded).generation.prefill_chunk is None  # no sliding layers: one pass
    config = loaded.model.config
    sliding = dataclasses.replace(loaded, name="a-local-sliding-model")
    monkeypatch.setattr(config, "layer_types", ["sliding_attention"] * config.num_hidden_layers, raising=False)
    assert default_prefill_chunk(sliding.name, config) == SLIDING_PREFILL_CHUNK
    assert session(sliding).generation.prefill_chunk == SLIDING_PREFILL_CHUNK
    assert session(sliding, generation=GenerationOptions(prefill_chunk=64)).generation.prefill_chunk == 64


def test_an_unsupported_model_fails_with_the_reason(loaded, session):
    foreign = dataclasses.replace(loaded, model=SimpleNamespace(config=SimpleNamespace(model_type="bert")))
    with pytest.raises(UserError, match="model family 'bert' is not supported; supported families: "):
        session(foreign)


def test_a_prompt_too_long_names_its_numbers_and_a_model_that_holds_it(loaded, template, monkeypatch):
    monkeypatch.setattr(loaded.model.config, "max_position_embeddings", 8192)
    short = pipeline.DocumentSession(loaded, Document("x.txt", "text", (Page(1, "x"),)), SNAPKV, template)
    around = short.build_prompt("Why?").length - 1  # the template's tokens (one "x" is one token here)
    long_document = Document("long.txt", "text", (Page(1, "x" * (8160 - around)),))
    reader = pipeline.DocumentSession(loaded, long_document, SNAPKV, template,
                                      generation=GenerationOptions(max_new_tokens=64))
    with pytest.raises(PromptTooLong) as caught:
        reader.build_prompt("Why?")
    error = caught.value
    assert error.limit == 8192 - 64 and error.context == 8192 and error.model == loaded.name
    assert 8192 - 64 < error.tokens <= 8192  # would fit the context, but not with the answer's room
    assert error.alternative == ("gemma3-270m", 32768)  # prompt + answer need more than smollm2's 8192


def test_a_fraction_budget_is_checked_against_the_questions_own_settings(loaded, session):
    from snapkv_cli.engine.settings import BudgetTooSmall

    reader = session(loaded)  # the session's budget is fine for this prompt
    too_small = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=0.001)
    with recorded_forwards(loaded.model) as forwards, pytest.raises(BudgetTooSmall):
        reader.ask("What is the code?", settings=too_small)
    assert forwards == []  # refused before any prefill
    fraction = CompressionSettings(method="snapkv", window_size=8, max_capacity_prompt=0.5)
    assert reader.ask("What is the code?", settings=fraction).result.generated_ids


def test_context_length_falls_back_to_the_tokenizer():
    config = PretrainedConfig()
    loaded = SimpleNamespace(model=SimpleNamespace(config=config), tokenizer=SimpleNamespace(model_max_length=777))
    assert pipeline.context_length(loaded) == 777
    config.max_position_embeddings = 512
    assert pipeline.context_length(loaded) == 512


def test_the_runner_s_wall_time_holds_the_prompt_it_builds_and_shows_first(loaded, template, monkeypatch):
    """The runner builds the prompt, shows it, then asks: the answer's wall time still starts at the question."""
    from snapkv_cli.answering.presenter import Presenter
    from snapkv_cli.answering.runner import Runner, RunOptions

    shown = []

    class Showing(Presenter):
        def prompt(self, prompt, window_size, index, total):
            shown.append((prompt.length, window_size, index, total))

    real = pipeline.DocumentSession.build_prompt

    def slow_build(self, question, settings=None):
        time.sleep(0.3)
        return real(self, question, settings)

    monkeypatch.setattr(pipeline.DocumentSession, "build_prompt", slow_build)
    runner = Runner(RunOptions(settings=SNAPKV, generation=FOUR, template=template), Showing(),
                    load_model=lambda *args, **kwargs: loaded)
    [answer] = runner.ask(DOCUMENT, ["What is the code?"])
    assert shown == [(answer.prompt.length, 8, 0, 1)]
    assert answer.report.timings.wall_s >= 0.3  # the prompt's build is part of the answer's wall time
