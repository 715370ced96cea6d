"""``snapkv inspect``: which prompt tokens the compressed cache kept, as JSON, in the terminal, as HTML and PNG.

The tiny random model selects arbitrary tokens; these tests check that every view shows exactly what the engine
kept (compared with a direct run of the same prompt and settings), that files are written atomically, and that the
HTML page really renders in a browser (headless Chromium).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

import snapkv_cli.cli as cli
from snapkv_cli.answering import session as pipeline
from snapkv_cli.answering.documents import load_document
from snapkv_cli.answering.inspection import Inspection, inspect_answer, token_texts
from snapkv_cli.answering.prompting import load_template
from snapkv_cli.defaults import METHOD, METHOD_SETTINGS
from snapkv_cli.engine import CompressionSettings
from snapkv_cli.generation import GenerationOptions
from snapkv_cli.views import heatmap, terminal
from snapkv_cli.views import html as html_view
from tests.example_writer import make_examples
from tests.helpers import assert_user_error, snapkv_json

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "Who repaired the fog signal?"
SMALL = ["--budget", "64", "--window", "8"]
NOTES = (
    "Skerrow Point Light, winter log.\n\n"
    "The lamp was lit at dusk and the wind came round to the north-west by midnight. "
    "Duncan Hale repaired the fog signal and oiled the clockwork before the storm.\n\n"
    "The relief boat Morven Lass arrived on Tuesday with coal, letters and fresh bread. "
    "Agnes Tolland counted 117 steps up to the lamp room and wrote the barometer reading in the book.\n\n"
    "Ærø café — 963 millibars, «calm» at dawn.\n"
)
PDF_PAGES = [
    "# Page one\n\nThe harbour office opens at seven. The first ferry leaves at eight.",
    "# Page two\n\nThe warehouse at Saltmarsh Gate holds frozen food and electronics for the winter season.",
    "# Page three\n\nThe annual meeting is held on 14 May in the old customs house by the quay.",
]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--virtual-time-budget=3000"]

runner = CliRunner()


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("inspect-docs")
    files = {"notes.txt": NOTES.encode("utf-8"), "report.pdf": make_examples.pdf_bytes(PDF_PAGES),
             "long.txt": ((ROOT / "examples" / "field_notes.txt").read_text(encoding="utf-8") * 3).encode("utf-8")}
    paths = {}
    for name, data in files.items():
        (folder / name).write_bytes(data)
        paths[name] = str(folder / name)
    return paths


@pytest.fixture(scope="module")
def long_context_model_path(tmp_path_factory):
    from tests.tiny_models import save_tiny_model_dir

    return str(save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama-16k"), max_position_embeddings=16384))


def inspect(*args: str, env: dict | None = None):
    return runner.invoke(cli.app, ["inspect", *args], env=env)


def inspect_ok(*args: str, **kwargs):
    result = inspect(*args, **kwargs)
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result


inspect_json = partial(snapkv_json, "inspect")


def small_settings(method: str | None, budget: int, window: int) -> CompressionSettings:
    """The settings the CLI runs with ``SMALL`` (and ``--method`` when ``method`` is given; its default otherwise)."""
    return CompressionSettings(method=method or METHOD, window_size=window, max_capacity_prompt=budget, kernel_size=15,
                               pooling="maxpool", **(METHOD_SETTINGS if method is None else {}))


def direct_run(loaded, doc: str, method: str | None = None, budget: int = 64, window: int = 8, *, pages=None,
               max_new_tokens: int = 2):
    """The same prompt and settings through ``pipeline.ask`` (prefill, selection and decoding), as ``ask`` runs."""
    settings = small_settings(method, budget, window)
    return pipeline.ask(loaded, load_document(doc, pages=pages), QUESTION, settings, load_template(None),
                        generation=GenerationOptions(max_new_tokens=max_new_tokens))


def small_inspection(loaded, doc: str, method: str | None = None, budget: int = 64, window: int = 8) -> Inspection:
    settings = small_settings(method, budget, window)
    selected = pipeline.select(loaded, load_document(doc), QUESTION, settings, load_template(None))
    return inspect_answer(selected, loaded.tokenizer)


# --------------------------------------------------------------------------- JSON


def test_json_matches_the_engine(docs, tiny_model_path, loaded):
    data = inspect_json(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *SMALL)
    engine = direct_run(loaded, docs["report.pdf"])
    prompt, records = engine.prompt, engine.result.cache.records
    assert data["schema_version"] == 1 and data["method"] == METHOD and data["model"] == tiny_model_path
    assert data["token_ids"] == prompt.input_ids
    assert "".join(data["tokens"]) == prompt.text and len(data["tokens"]) == prompt.length
    assert data["window"] == [prompt.length - 8, prompt.length]
    assert data["question_span"] == list(prompt.question_span)
    assert data["document_span"] == list(prompt.document_span)
    assert data["settings"] == engine.report.to_json()["settings"]
    assert data["cache"] == engine.report.to_json()["cache"]
    assert data["prompt"] == engine.report.to_json()["prompt"] and data["prompt_tokens"] == prompt.length
    assert "answer" not in data and "generated_tokens" not in data
    assert set(data["timings"]).isdisjoint({"decode_s", "decode_tokens_per_s"})  # nothing was decoded
    assert [layer["layer"] for layer in data["layers"]] == sorted(records) == [0, 1, 2]
    for layer in data["layers"]:
        record = records[layer["layer"]]
        assert layer["compressed"] is True and layer["scored"] is True and layer["capacity"] == 64
        assert [head["head"] for head in layer["heads"]] == [0, 1]
        for head in layer["heads"]:
            assert head["kept"] == record.kept_positions[0, head["head"]].tolist()
            expected = record.kept_scores()[0, head["head"]].tolist()
            assert head["scores"] == pytest.approx(expected, rel=1e-5, abs=1e-9)
    # pages: one run of token positions per page, covering the document, with ask's kept share
    assert [page["page"] for page in data["pages"]] == [1, 2, 3]
    assert data["pages"][0]["span"][0] == prompt.document_span[0]
    assert data["pages"][-1]["span"][1] == prompt.document_span[1]
    for page, row in zip(data["pages"], engine.report.to_json()["pages"]):
        start, end = page["span"]
        assert set(prompt.token_pages[start:end]) == {page["page"]}
        assert page["kept_share"] == row["kept_share"] and page["document_tokens"] == end - start
    # the kept share, counted here: kept positions on the page over all (layer, KV head) pairs / (its tokens x pairs)
    pairs = [head["kept"] for layer in data["layers"] for head in layer["heads"]]
    for page in data["pages"]:
        start, end = page["span"]
        kept_on_page = sum(1 for kept in pairs for position in kept if start <= position < end)
        assert page["kept_share"] == pytest.approx(kept_on_page / ((end - start) * len(pairs)), abs=1e-4)
    assert 0 < min(page["kept_share"] for page in data["pages"]) < max(page["kept_share"] for page in data["pages"]) < 1


def test_kernel_pooling_and_gqa_options_reach_the_scores(docs, tiny_model_path):
    """The scores ``inspect`` shows are those of the requested kernel, pooling and GQA reduction, computed here from
    the eager model's own attention weights (tests/engine/test_scores_reference.py)."""
    import torch
    import transformers

    from tests.engine.test_scores_reference import snapkv_reference

    eager = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="eager").eval()
    seen = set()
    cases = (("5", "avgpool", "max", "centered"), ("15", "maxpool", "mean", "centered"),
             ("15", "maxpool", "mean", "causal"), ("1", "avgpool", "mean", "centered"))
    for kernel, pooling, gqa, window in cases:
        data = inspect_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--method", "snapkv",
                            "--kernel", kernel, "--pooling", pooling, "--gqa", gqa, "--pooling-window", window)
        with torch.no_grad():
            attentions = eager(torch.tensor([data["token_ids"]]), output_attentions=True).attentions
        settings = CompressionSettings(window_size=8, max_capacity_prompt=64, kernel_size=int(kernel),
                                       pooling=pooling, pooling_window=window, gqa_aggregation=gqa)
        for layer in data["layers"]:
            reference = snapkv_reference(attentions[layer["layer"]][0].double(), settings, len(layer["heads"]))
            for head in layer["heads"]:
                expected = reference[head["head"], head["kept"]].tolist()
                assert head["scores"] == pytest.approx(expected, rel=2e-5, abs=1e-7), (kernel, pooling, gqa, window)
        seen.add(json.dumps(data["layers"]))
    assert len(seen) == len(cases)


def test_random_method_follows_the_seed(docs, tiny_model_path):
    def kept(*seed: str) -> list:
        data = inspect_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--method", "random",
                            *seed)
        return [head["kept"] for layer in data["layers"] for head in layer["heads"]]

    assert kept("--seed", "1") == kept("--seed", "1")
    assert kept("--seed", "1") != kept("--seed", "2")
    assert kept() != kept("--seed", "2")


def test_json_full_method_and_streamingllm(docs, tiny_model_path):
    full = inspect_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--method", "full")
    everything = list(range(full["prompt_tokens"]))
    for layer in full["layers"]:
        assert layer["scored"] is False and layer["compressed"] is False
        assert all(head["kept"] == everything and head["scores"] is None for head in layer["heads"])
    full_pdf = inspect_json(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *SMALL, "--method", "full")
    assert [page["kept_share"] for page in full_pdf["pages"]] == [1.0, 1.0, 1.0]  # every token of every page kept
    streaming = inspect_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--method", "streamingllm",
                             "--budget", "24", "--window", "8")
    length = streaming["prompt_tokens"]
    expected = [0, 1, 2, 3, *range(length - 20, length)]  # 4 sinks + the most recent tokens
    assert all(head["kept"] == expected for layer in streaming["layers"] for head in layer["heads"])


def test_answer_flag(docs, tiny_model_path):
    base = [docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--max-new-tokens", "4"]
    asked = json.loads(runner.invoke(cli.app, ["ask", *base, "--json", "--quiet"]).stdout)
    data = inspect_json(*base, "--answer")
    assert data["answer"] == asked["answer"] and data["generated_tokens"] == asked["generated_tokens"]
    plain = inspect_ok(*base, "--answer", "--quiet")
    assert plain.stderr == ""
    assert plain.stdout.startswith(asked["answer"] + "\n")
    assert "Kept share by paragraph" in plain.stdout


def test_token_texts_rebuild_multibyte_text(loaded):
    text = "Ærø café — «calm» 🌊 at dawn, 963 millibars."
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = token_texts(loaded.tokenizer, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert "" in pieces  # some bytes of a character came in a token of their own


# --------------------------------------------------------------------------- terminal


def _styled_text(renderable, style) -> str:
    """The text rendered with ``style`` (whitespace removed: line breaks split segments)."""
    console = Console(width=400, force_terminal=True, color_system="truecolor")
    return "".join(segment.text for segment in console.render(renderable) if segment.style == style).replace(
        " ", "").replace("\n", "")


def test_terminal_marks_kept_tokens_of_one_head(docs, loaded):
    inspection = small_inspection(loaded, docs["notes.txt"], method="streamingllm", budget=24, window=8)
    length = inspection.length
    view = terminal.build_view(inspection, layer=0, head=0, full=True)

    def joined(positions) -> str:
        return "".join(inspection.tokens[p] for p in positions).replace(" ", "").replace("\n", "")

    # the legend's swatch comes first, then the tokens
    assert _styled_text(view, terminal.KEPT_STYLE) == "kept" + joined([0, 1, 2, 3, *range(length - 20, length - 8)])
    assert _styled_text(view, terminal.WINDOW_STYLE) == "window" + joined(range(length - 8, length))
    assert _styled_text(view, terminal.LEVEL_STYLES[3]) == ""  # one head: kept or not, no shades between


def test_terminal_shades_by_share_of_pairs(docs, loaded):
    inspection = small_inspection(loaded, docs["notes.txt"])
    inspection.kept[:] = False
    inspection.kept[:, :, inspection.window[0]:] = True
    inspection.kept[0, 0, 5] = True  # 1 of 6 pairs
    inspection.kept[:, :, 7] = True  # all pairs
    inspection.kept[0, :, 9] = True  # 2 of 6 pairs; all of layer 0
    view = terminal.build_view(inspection, full=True)
    token = lambda p: inspection.tokens[p].replace(" ", "").replace("\n", "")
    # each level's legend swatch comes first, then the tokens
    assert _styled_text(view, terminal.LEVEL_STYLES[1]) == "≤20%" + token(5)
    assert _styled_text(view, terminal.LEVEL_STYLES[2]) == "≤40%" + token(9)
    assert _styled_text(view, terminal.LEVEL_STYLES[5]) == "≤100%" + token(7)
    layer_view = terminal.build_view(inspection, layer=0, full=True)  # share of layer 0's 2 heads
    assert _styled_text(layer_view, terminal.LEVEL_STYLES[3]) == "≤60%" + token(5)
    assert _styled_text(layer_view, terminal.LEVEL_STYLES[5]) == "≤100%" + token(7) + token(9)
    assert [terminal.level(x) for x in (0, 0.01, 0.2, 0.21, 0.5, 0.8, 0.81, 1)] == [0, 1, 1, 2, 3, 4, 5, 5]


def _plain(renderable, width: int = 400) -> str:
    """What a console without colour (a file, a pipe) prints."""
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_without_colour_levels_are_marks_the_legend_explains(docs, loaded):
    inspection = small_inspection(loaded, docs["notes.txt"])
    inspection.kept[:] = False
    inspection.kept[:, :, inspection.window[0]:] = True
    inspection.kept[0, 0, 40] = True  # 1 of 6 pairs: level 1
    inspection.kept[:, :, 42:45] = True  # all pairs: level 5
    inspection.kept[0, :, 47] = True  # 2 of 6 pairs: level 2
    tokens = inspection.tokens
    text = _plain(terminal.build_view(inspection, full=True, plain=True))
    assert "Legend: ⟦1 …⟧ ⟦2 …⟧ ⟦3 …⟧ ⟦4 …⟧ ⟦5 …⟧ kept by ≤20%, ≤40%, ≤60%, ≤80%, ≤100% of the pairs; " \
           "unmarked text: kept by none; ⟦W text⟧ the observation window (always kept)" in text
    marked = dict(re.findall(r"⟦(\S) ([^⟧]*)⟧", text.split("Shading:")[1]))
    assert marked == {"1": tokens[40].strip(), "5": "".join(tokens[42:45]).strip(), "2": tokens[47].strip(),
                      "W": "".join(tokens[inspection.window[0]:]).strip()}
    assert re.sub(r"⟦\S |⟧", "", text).count("".join(tokens[:inspection.window[0]]).strip()) == 1  # nothing lost
    one_pair = _plain(terminal.build_view(inspection, layer=0, head=0, full=True, plain=True))
    assert "Legend: ⟦K text⟧ kept; unmarked text: not kept; ⟦W text⟧ the observation window" in one_pair
    assert re.findall(r"⟦K ([^⟧]*)⟧", one_pair.split("Shading:")[1]) == [
        tokens[40].strip(), "".join(tokens[42:45]).strip(), tokens[47].strip()]
    coloured = Console(width=400, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    terminal.render(inspection, coloured, full=True, page=False)
    assert "⟦" not in coloured.file.getvalue() and "\x1b[" in coloured.file.getvalue()
    piped = Console(width=400, file=io.StringIO())  # not a terminal: Rich gives it no colour
    terminal.render(inspection, piped, full=True, page=False)
    assert piped.file.getvalue() == text


def test_cli_full_view_of_one_layer_and_head(docs, tiny_model_path):
    result = inspect_ok(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--method", "streamingllm",
                        "--budget", "24", "--window", "8", "--layer", "0", "--head", "0", "--full", "--quiet")
    assert result.stderr == ""  # stdout is not a terminal here: marks stand for the shading
    text = " ".join(result.stdout.split())
    assert "Legend: ⟦K text⟧ kept; unmarked text: not kept; ⟦W text⟧ the observation window" in text
    assert "Shading: layer 0, KV head 0" in text
    kept = re.findall(r"⟦K ([^⟧]*)⟧", result.stdout.split("Shading:")[1])
    assert len(kept) == 2 and kept[0].startswith("<|im_start|>")  # the 4 sink tokens, then the recent ones
    assert kept[1].endswith(QUESTION[-12:] + "<|im_end|>")
    assert re.findall(r"⟦W ([^⟧]*)⟧", result.stdout)[-1].endswith("assistant")
    assert "".join(NOTES.split()) in "".join(re.sub(r"⟦\S |⟧", "", result.stdout).split())  # the whole document


def test_default_view_of_an_8k_token_document_fits_80_columns(docs, long_context_model_path):
    result = inspect_ok(docs["long.txt"], QUESTION, "--model", long_context_model_path, "--budget", "512",
                        "--quiet", env={"COLUMNS": "80"})
    lines = result.stdout.splitlines()
    prompt_tokens = int(re.search(r"prompt (\d+) tokens", result.stdout).group(1))
    assert prompt_tokens > 8000
    assert max(len(line) for line in lines) <= 80
    assert len(lines) < 130  # a summary, not the document
    assert "Kept share by paragraph" in result.stdout and "Observation window" in result.stdout
    assert len(re.findall(r"^#\d  positions \d+-\d+ · page 1 · \d+% kept$", result.stdout, re.M)) == 5
    assert len([line for line in lines if line.startswith(" ¶")]) <= 20  # paragraphs grouped


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("extra", "fragments"), [
    (["--layer", "3"], ["--layer 3 is out of range", "3 layers (0-2)"]),
    (["--head", "2"], ["--head 2 is out of range", "2 KV heads (0-1)"]),
    (["--png-scores"], ["--png-scores needs --png FILE"]),
    (["--html", "/no/such/dir/x.html"], ["cannot write /no/such/dir/x.html", "does not exist"]),
    (["--budget", "8"], ["must exceed window_size"]),
    (["--method", "magic"], ["unknown method 'magic'"]),
    (["--find", "zebra"], ["--find 'zebra': not in the document or the question"]),
    (["--find", ""], ["--find needs some text"]),
])
def test_errors_are_one_line(docs, tiny_model_path, extra, fragments):
    assert_user_error(inspect(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, *extra), *fragments)


@pytest.mark.parametrize(("extra", "fragment"), [(["--layer", "3"], "--layer 3 is out of range"),
                                                (["--head", "2"], "--head 2 is out of range")])
def test_a_layer_or_head_beyond_the_model_is_refused_before_the_prefill(docs, tiny_model_path, monkeypatch, extra,
                                                                         fragment):
    """The tiny model has 3 layers and 2 KV heads: --layer 3 and --head 2 (the counts themselves) name none, and
    are refused once the model is loaded, before it reads a single prompt token."""
    from tests.helpers import record_loaded_forwards

    forwards, loaded_models = record_loaded_forwards(monkeypatch)
    assert_user_error(inspect(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, *extra), fragment)
    assert len(loaded_models) == 1 and forwards == []


def test_a_model_without_kv_head_counts_is_checked_against_its_attention_heads():
    """A config without ``num_key_value_heads`` (GPT-2's: every head its own KV head) has as many KV heads as
    attention heads; one that counts neither layers nor heads refuses nothing (the cache records check after)."""
    from transformers import GPT2Config, PretrainedConfig

    from snapkv_cli.cli.inspect import check_layer_and_head
    from snapkv_cli.errors import UserError

    gpt2 = GPT2Config(n_layer=2, n_head=4)
    check_layer_and_head(gpt2, 1, 3)  # the last layer and head
    with pytest.raises(UserError) as refused:
        check_layer_and_head(gpt2, 1, 4)
    assert str(refused.value) == "head 4 is out of range: the model has 4 KV heads (0-3)"
    with pytest.raises(UserError) as refused:
        check_layer_and_head(gpt2, 2, 0)
    assert str(refused.value) == "layer 2 is out of range: the model has 2 layers (0-1)"
    check_layer_and_head(PretrainedConfig(), 100, 100)


def test_an_empty_find_text_is_refused_in_those_words():
    from snapkv_cli.cli.inspect import check_searched
    from snapkv_cli.errors import UserError

    with pytest.raises(UserError) as refused:
        check_searched(["Hale", ""], "Duncan Hale repaired it.", "Who?")
    assert str(refused.value) == "--find needs some text"
    assert check_searched(["Hale", "Who", "Hale"], "Duncan Hale repaired it.", "Who?") == ["Hale", "Who"]


def test_top_passages_are_the_best_runs_that_do_not_overlap(docs, loaded):
    """Each passage is the run of ``size`` document tokens (before the window) with the highest mean kept share
    among those that overlap no passage before it, as a search over every run finds."""
    inspection = small_inspection(loaded, docs["notes.txt"])
    start, end = inspection.prompt.document_span[0], min(inspection.prompt.document_span[1], inspection.window[0])
    share = np.zeros(inspection.length)
    share[start:end] = np.random.default_rng(3).random(end - start) ** 4
    share[start + 30:start + 40] += 2.0  # one hot region: overlapping runs around it all score high
    size, count = 8, 5
    passages = inspection.top_passages(share, count, size)
    taken: list[tuple[int, int]] = []
    for _ in range(count):
        runs = [(share[first:first + size].mean(), first) for first in range(start, end - size + 1)
                if all(first + size <= a or b <= first for a, b in taken)]
        best_mean, best = max(runs, key=lambda run: (run[0], -run[1]))
        taken.append((best, best + size))
        assert passages[len(taken) - 1].share == pytest.approx(best_mean)
    assert [(passage.start, passage.end) for passage in passages] == taken
    assert all(a_end <= b_start or b_end <= a_start
               for i, (a_start, a_end) in enumerate(taken) for b_start, b_end in taken[i + 1:])


def test_output_path_is_a_directory(docs, tiny_model_path, tmp_path):
    assert_user_error(inspect(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--png", str(tmp_path)),
                      "is a directory")


# --------------------------------------------------------------------------- --find


def test_find_covers_the_text_and_counts_each_pairs_tokens(docs, loaded):
    inspection = small_inspection(loaded, docs["notes.txt"])
    (occurrence,) = inspection.find("Duncan Hale")
    start, end = occurrence.start, occurrence.end
    covered = "".join(inspection.tokens[start:end])
    assert "Duncan Hale" in covered  # the tokens cover it, and no token more
    assert "Duncan Hale" not in "".join(inspection.tokens[start + 1:end])
    assert "Duncan Hale" not in "".join(inspection.tokens[start:end - 1])
    inspection.kept[:] = False
    inspection.kept[0, 0, start:end] = True  # all of it
    inspection.kept[1, 1, start] = True  # one token of it
    inspection.kept[2, :, start - 1] = inspection.kept[2, :, end] = True  # its neighbours, not it
    (occurrence,) = inspection.find("Duncan Hale")
    assert occurrence.kept_per_head.tolist() == [[end - start, 0], [0, 1], [0, 0]]
    assert occurrence.heads() == (1, 1, 4)
    assert occurrence.to_json() == {"text": "Duncan Hale", "span": [start, end], "heads_whole": 1, "heads_part": 1,
                                    "heads_none": 4, "kept_per_head": [[end - start, 0], [0, 1], [0, 0]]}
    assert [o.start for o in inspection.find("lamp")] == sorted({o.start for o in inspection.find("lamp")})
    assert len(inspection.find("lamp")) == NOTES.count("lamp") == 2
    accented = inspection.find("Ærø café")[0]
    assert "".join(inspection.tokens[accented.start:accented.end]).strip() == "Ærø café"
    assert inspection.find("no such words") == []
    with pytest.raises(ValueError, match="empty"):
        inspection.find("")


def test_cli_find_json_counts_what_the_layers_kept(docs, tiny_model_path):
    data = inspect_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL,
                        "--find", "Duncan Hale", "--find", "lamp", "--find", "lamp")
    assert [found["text"] for found in data["found"]] == ["Duncan Hale", "lamp", "lamp"]  # a repeated --find once
    for found in data["found"]:
        start, end = found["span"]
        assert found["text"] in "".join(data["tokens"][start:end])
        counted = [[sum(start <= position < end for position in head["kept"]) for head in layer["heads"]]
                   for layer in data["layers"]]
        assert found["kept_per_head"] == counted
        assert found["heads_whole"] == sum(count == end - start for row in counted for count in row)
        assert found["heads_none"] == sum(count == 0 for row in counted for count in row)
        assert found["heads_whole"] + found["heads_part"] + found["heads_none"] == 6
    assert "found" not in inspect_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL)


def test_cli_find_in_the_terminal_view(docs, tiny_model_path):
    result = inspect_ok(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--find", "Duncan Hale",
                        "--find", "fog signal", env={"COLUMNS": "200"})
    found = re.findall(r"^Found '([^']+)' at positions \d+-\d+ · (page 1|question): kept "
                       r"whole by (\d+) of 6 \(layer, KV head\) pairs, in part by (\d+), not at all by (\d+)$",
                       result.stdout, re.M)
    assert [(text, where) for text, where, *_ in found] == [  # the document's, then the question's
        ("Duncan Hale", "page 1"), ("fog signal", "page 1"), ("fog signal", "question")]
    assert all(int(whole) + int(part) + int(none) == 6 for *_, whole, part, none in found)
    # each occurrence's layer-by-layer table says what --json's kept_per_head says
    expected = inspect_json(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--find", "Duncan Hale",
                            "--find", "fog signal")["found"]
    tables = result.stdout.split("Layer by layer: how many of its 2 KV heads kept all ")[1:]
    assert len(tables) == len(expected) == 3
    for table, occurrence in zip(tables, expected):
        length = occurrence["span"][1] - occurrence["span"][0]
        assert table.startswith(f"{length} tokens, some, none; then each head's count of the {length} it kept")
        rows = {}
        for layers, kept_all, some, none, counts in re.findall(
                r"^ (\d+(?:-\d+)?) +(\d+) +(\d+) +(\d+) +(\d+(?: \d+)*) *$", table, re.M):
            first, _, last = layers.partition("-")
            for layer in range(int(first), int(last or first) + 1):
                rows[layer] = [int(count) for count in counts.split()]
            heads = [int(count) for count in counts.split()]
            assert [int(kept_all), int(some), int(none)] == [
                sum(c == length for c in heads), sum(0 < c < length for c in heads), sum(c == 0 for c in heads)]
        assert [rows[layer] for layer in sorted(rows)] == occurrence["kept_per_head"]
    assert "Found" not in result.stderr
    window = inspect_ok(docs["notes.txt"], QUESTION, "--model", tiny_model_path, "--budget", "64", "--window", "16",
                        "--find", "signal?", env={"COLUMNS": "200"})
    assert re.search(r"^Found 'signal\?' at positions \d+-\d+ · observation window, always kept: kept whole by 6 of 6",
                     window.stdout, re.M)


def test_cli_find_of_a_truncated_text(tiny_model_path, tmp_path):
    document = tmp_path / "long.txt"
    document.write_text("The tide was low. " * 300 + "Zanzibar. " + "The tide was low. " * 300, encoding="utf-8")
    base = [str(document), QUESTION, "--model", tiny_model_path, *SMALL, "--truncate", "middle"]
    assert_user_error(inspect(*base, "--find", "Zanzibar"), "--find 'Zanzibar': not in the prompt")
    assert inspect_json(*base, "--find", "tide")["found"]


# --------------------------------------------------------------------------- files


def test_html_and_png_are_written(docs, tiny_model_path, tmp_path):
    page, image, scores = tmp_path / "view.html", tmp_path / "map.png", tmp_path / "scores.png"
    result = inspect_ok(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *SMALL, "--html", str(page),
                        "--png", str(image))
    assert f"Wrote {page}" in result.stderr and f"Wrote {image}" in result.stderr
    assert "Kept share by page" in result.stdout and "Wrote" not in result.stdout
    text = page.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text and "<link" not in text and " src=" not in text
    data = json.loads(re.search(r'<script type="application/json" id="snapkv-data">(.*?)</script>', text,
                                re.S).group(1))
    assert QUESTION in "".join(data["tokens"]) and data["window"] == [len(data["tokens"]) - 8, len(data["tokens"])]
    assert data["report"]["prompt_tokens"] == len(data["tokens"]) and "answer" not in data["report"]
    assert "decode_s" not in data["report"]["timings"] and "layers" in data["report"]
    inspect_ok(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *SMALL, "--png", str(scores),
               "--png-scores", "--head", "1", "--quiet")
    from PIL import Image

    for path in (image, scores):
        with Image.open(path) as picture:
            assert picture.format == "PNG" and picture.width > 800 and picture.height > 300
            assert len(picture.convert("RGB").getcolors(maxcolors=1 << 20)) > 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.png", "scores.png", "view.html"]


def test_heatmap_values(docs, loaded):
    inspection = small_inspection(loaded, docs["notes.txt"])
    share = heatmap.cell_values(inspection)
    assert share.shape == (3, inspection.length)
    assert np.array_equal(share, inspection.kept.mean(axis=1))
    one = heatmap.cell_values(inspection, head=1)
    assert set(np.unique(one)) <= {0.0, 1.0} and np.array_equal(one, inspection.kept[:, 1])
    inspection.scores[1] = np.nan  # as for a layer that was not scored
    scores = heatmap.cell_values(inspection, scores=True)
    assert np.isnan(scores[1]).all() and np.isfinite(scores[[0, 2]]).all()
    assert scores[0].max() <= 1.0 and scores[0].min() >= heatmap.SCORE_FLOOR
    assert heatmap.binned(np.ones((2, 5000)), 2400).shape[1] <= 2400


def test_heatmap_marks_what_find_found(docs, loaded):
    from matplotlib.colors import to_hex

    inspection = small_inspection(loaded, docs["notes.txt"])
    found = (inspection.find("lamp"), inspection.find("Duncan Hale"))
    axes = heatmap.draw(inspection, found=found).axes[0]
    for occurrences, colour in zip(found, heatmap.FOUND_COLOURS):
        frames = sorted((patch.get_x(), patch.get_x() + patch.get_width()) for patch in axes.patches
                        if to_hex(patch.get_edgecolor()) == colour)
        assert frames == [(o.start, o.end) for o in occurrences]  # a frame over each occurrence, in its colour
        triangles = [line for line in axes.lines if line.get_marker() == "v" and to_hex(line.get_color()) == colour]
        assert sorted(float(line.get_xdata()[0]) for line in triangles) == [(o.start + o.end) / 2 for o in occurrences]
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert labels == ["--find 'lamp' (2 occurrences)", "--find 'Duncan Hale' (1 occurrence)"]
    assert heatmap.draw(inspection).axes[0].get_legend() is None  # nothing searched, nothing marked


def test_files_are_atomic(docs, tiny_model_path, tmp_path, monkeypatch):
    page, image = tmp_path / "view.html", tmp_path / "map.png"
    page.write_text("old page", encoding="utf-8")

    def broken_report(report):
        raise RuntimeError("rendering failed")

    monkeypatch.setattr(html_view, "report_html", broken_report)  # after the header was written
    result = inspect(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--html", str(page))
    assert_user_error(result, "RuntimeError: rendering failed")
    assert [p.name for p in tmp_path.iterdir()] == ["view.html"] and page.read_text() == "old page"
    page.unlink()
    monkeypatch.undo()

    from matplotlib.figure import Figure

    def broken_savefig(self, file, **kwargs):
        file.write(b"\x89PNG partial")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    result = inspect(docs["notes.txt"], QUESTION, "--model", tiny_model_path, *SMALL, "--png", str(image))
    assert_user_error(result, "OSError: disk full")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the page in a browser


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: the HTML view must be checked in a browser on CI "
                        "(apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


def run_chromium(binary: str, url: str, profile: Path, *extra: str) -> str:
    completed = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
                               capture_output=True, text=True, timeout=90)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed.stdout


def kept_spans(dom: str) -> list[int]:
    return [int(i) for i in re.findall(r'<span class="t [^"]*\bkept\b[^"]*" data-i="(\d+)"', dom)]


def test_html_renders_in_chromium(docs, tiny_model_path, loaded, tmp_path):
    binary = chromium()
    page = tmp_path / "view.html"
    inspect_ok(docs["report.pdf"], QUESTION, "--model", tiny_model_path, *SMALL, "--html", str(page),
               "--layer", "0", "--head", "0", "--quiet")
    records = direct_run(loaded, docs["report.pdf"]).result.cache.records
    # the page opens on --layer 0 --head 0: its spans, drawn by the script, mark exactly what that head kept
    dom = run_chromium(binary, page.as_uri(), tmp_path / "profile", "--dump-dom")
    assert 'data-ready="1"' in dom
    length = records[0].prompt_length
    assert len(re.findall(r'<span class="t[ "]', dom)) == length
    assert kept_spans(dom) == records[0].kept_positions[0, 0].tolist()
    assert len(re.findall(r'<span class="t [^"]*\bw\b', dom)) == 8  # the window
    assert dom.count('<span class="pg">page ') == 3
    # "all" heads of layer 1 (from the address): a token is marked when any head kept it
    dom = run_chromium(binary, page.as_uri() + "#layer=1&head=all", tmp_path / "profile", "--dump-dom")
    union = sorted(set(records[1].kept_positions[0].reshape(-1).tolist()))
    assert kept_spans(dom) == union
    assert 'id="stats">layer 1, 2 KV heads' in dom
    shot = tmp_path / "shot.png"
    run_chromium(binary, page.as_uri(), tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,900")
    from PIL import Image

    with Image.open(shot) as picture:
        assert picture.size == (1200, 900)
        colours = picture.convert("RGB").getcolors(maxcolors=1 << 20)
    assert len(colours) > 200  # text, shading and tables, not a blank page
    assert any(abs(r - 0x2a) < 8 and abs(g - 0x4f) < 8 and abs(b - 0xd6) < 8 for _, (r, g, b) in colours)  # window
