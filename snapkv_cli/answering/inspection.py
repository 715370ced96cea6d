"""What the compressed cache kept of each prompt token: the data behind ``snapkv inspect`` and its views.

:func:`inspect_answer` turns a prefilled :class:`~snapkv_cli.answering.session.Answer` (from ``pipeline.select`` or
``pipeline.ask``) into an :class:`Inspection`: the prompt's tokens as text, and per (layer, KV head) which prompt
positions were kept and their policy scores. The views (``snapkv_cli.views``) only read an ``Inspection``;
:meth:`Inspection.to_json` is the ``snapkv inspect --json`` object (schema in docs/usage.md).
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass

import numpy as np

from ..errors import OutOfRange, UserError
from .prompting import Prompt
from .report import Report

SCHEMA_VERSION = 1
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")


def token_texts(tokenizer, input_ids: list[int], context: int = 4) -> list[str]:
    """The text of each token, so that ``"".join(...)`` gives back the decoded prompt.

    Each token is decoded after a few preceding tokens and keeps only the text it adds, so tokenizers that drop a
    leading space when a token is decoded alone still give it back. A token that ends inside a multi-byte character
    gets "" and the token that completes the character carries it.
    """
    options = dict(skip_special_tokens=False, clean_up_tokenization_spaces=False)
    pieces: list[str] = []
    done = 0  # tokens [0, done) have their text
    for index in range(len(input_ids)):
        start = max(0, done - context)
        before = tokenizer.decode(input_ids[start:done], **options) if done > start else ""
        after = tokenizer.decode(input_ids[start:index + 1], **options)
        waiting = index + 1 - done
        if after.endswith("\ufffd") and index + 1 < len(input_ids) and waiting < context:
            pieces.append("")
            continue
        pieces.append(after[len(before):])
        done = index + 1
    return pieces


@dataclass(frozen=True)
class Segment:
    """A labelled run of prompt tokens [start, end): a page, a paragraph (or a group of them), or the template."""

    label: str
    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Passage:
    """A run of document tokens [start, end) and the mean kept share of its tokens."""

    start: int
    end: int
    share: float


@dataclass(frozen=True)
class Occurrence:
    """One place where a searched text lies in the prompt: the tokens [start, end) that cover it, and how many of them
    each (layer, KV head) kept. kept_per_head: (layers, kv_heads) int, each in [0, end - start]."""

    text: str
    start: int
    end: int
    kept_per_head: np.ndarray

    @property
    def length(self) -> int:
        return self.end - self.start

    def heads(self) -> tuple[int, int, int]:
        """How many (layer, KV head) pairs kept all of its tokens, some of them, and none."""
        whole = int((self.kept_per_head == self.length).sum())
        none = int((self.kept_per_head == 0).sum())
        return whole, self.kept_per_head.size - whole - none, none

    def to_json(self) -> dict:
        whole, part, none = self.heads()
        return {"text": self.text, "span": [self.start, self.end], "heads_whole": whole, "heads_part": part,
                "heads_none": none, "kept_per_head": self.kept_per_head.tolist()}


@dataclass
class Inspection:
    """A prompt and what the compressed cache kept of it, per layer and KV head.

    kept: (layers, kv_heads, prompt_length) bool; scores: (layers, kv_heads, prompt_length) float32 policy scores
    (SnapKV: pooled window votes), NaN for layers where nothing was scored (the prompt fitted the budget, the method
    keeps everything, or a sliding-window layer). ``layers`` are the model's layer indices of the rows.
    """

    prompt: Prompt
    tokens: list[str]
    layers: list[int]
    kept: np.ndarray
    scores: np.ndarray
    scored: list[bool]
    report: Report
    answer: str | None = None
    generated_tokens: int | None = None

    # -- shape -------------------------------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self.prompt.length

    @property
    def num_heads(self) -> int:
        return self.kept.shape[1]

    @property
    def window(self) -> tuple[int, int]:
        """The observation window: the last ``window_size`` prompt positions, [start, end)."""
        return max(0, self.length - self.report.settings.window_size), self.length

    def in_window(self, position: int) -> bool:
        return position >= self.window[0]

    # -- selections of (layer, head) pairs -----------------------------------------------------------------------
    def check_selection(self, layer: int | None = None, head: int | None = None) -> None:
        if layer is not None and layer not in self.layers:
            raise OutOfRange("layer", layer, len(self.layers))
        if head is not None and not 0 <= head < self.num_heads:
            raise OutOfRange("head", head, self.num_heads)

    def _rows(self, layer: int | None, head: int | None) -> np.ndarray:
        """The kept mask of the selected pairs, (pairs, prompt_length); a selection holds at least one pair."""
        self.check_selection(layer, head)
        layer_index = slice(None) if layer is None else [self.layers.index(layer)]
        head_index = slice(None) if head is None else [head]
        return self.kept[layer_index][:, head_index].reshape(-1, self.length)

    def pairs(self, layer: int | None = None, head: int | None = None) -> int:
        return self._rows(layer, head).shape[0]

    def kept_counts(self, layer: int | None = None, head: int | None = None) -> np.ndarray:
        """(prompt_length,) how many selected (layer, KV head) pairs kept each position."""
        return self._rows(layer, head).sum(axis=0)

    def kept_share(self, layer: int | None = None, head: int | None = None) -> np.ndarray:
        """(prompt_length,) share of the selected (layer, KV head) pairs that kept each position, in [0, 1]."""
        return self._rows(layer, head).mean(axis=0)

    def describe_selection(self, layer: int | None = None, head: int | None = None) -> str:
        if layer is not None and head is not None:
            return f"layer {layer}, KV head {head}"
        if layer is not None:
            return f"layer {layer}, share of its {self.num_heads} KV heads"
        if head is not None:
            return f"KV head {head}, share of {len(self.layers)} layers"
        return f"share of {len(self.layers)} layers x {self.num_heads} KV heads"

    def find(self, text: str) -> list[Occurrence]:
        """Every occurrence of ``text`` in the prompt's text (not overlapping), each as the tokens that cover it."""
        if not text:
            raise ValueError("nothing to find: the text is empty")
        lengths = np.array([len(token) for token in self.tokens], dtype=np.int64)
        ends = np.cumsum(lengths)  # token i spans characters [ends[i] - lengths[i], ends[i]) of the prompt's text
        starts = ends - lengths
        occurrences = []
        for match in re.finditer(re.escape(text), "".join(self.tokens)):
            first = int(np.searchsorted(ends, match.start(), side="right"))  # the first token ending after it starts
            end = int(np.searchsorted(starts, match.end(), side="left"))  # past the last token starting before its end
            occurrences.append(Occurrence(text, first, end, self.kept[:, :, first:end].sum(axis=-1)))
        return occurrences

    # -- where tokens are --------------------------------------------------------------------------------------
    def page_runs(self) -> list[tuple[int, int, int]]:
        """``(page, start, end)`` for each run of consecutive prompt tokens on the same document page."""
        runs: list[tuple[int, int, int]] = []
        for position, page in enumerate(self.prompt.token_pages):
            if page is None:
                continue
            if runs and runs[-1][0] == page and runs[-1][2] == position:
                runs[-1] = (page, runs[-1][1], position + 1)
            else:
                runs.append((page, position, position + 1))
        return runs

    def page_of(self, position: int) -> int | None:
        return self.prompt.token_pages[position]

    def paragraphs(self) -> list[tuple[int, int]]:
        """[start, end) token runs of the document's paragraphs (split at blank lines)."""
        start, end = self.prompt.document_span
        if end <= start:
            return []
        offsets = [0]
        for position in range(start, end):
            offsets.append(offsets[-1] + len(self.tokens[position]))
        text = "".join(self.tokens[start:end])
        breaks = [match.end() for match in _PARAGRAPH_BREAK.finditer(text)]
        runs: list[tuple[int, int]] = []
        current = None
        for position in range(start, end):
            number = bisect.bisect_right(breaks, offsets[position - start])
            if runs and current == number:
                runs[-1] = (runs[-1][0], position + 1)
            else:
                runs.append((position, position + 1))
                current = number
        return runs

    def segments(self, max_rows: int = 20) -> list[Segment]:
        """Pages (several pages) or paragraphs of the document, grouped to at most ``max_rows``, plus the
        template before the document and the rest of the prompt (the question) after it."""
        pages = self.page_runs()
        if len({page for page, _, _ in pages}) > 1:
            units = [(f"p{page}", start, end) for page, start, end in pages]
            prefix = "p"
        else:
            units = [(f"¶{number}", start, end) for number, (start, end) in enumerate(self.paragraphs(), 1)]
            prefix = "¶"
        segments: list[Segment] = []
        document_start, document_end = self.prompt.document_span
        if document_start > 0:
            segments.append(Segment("start", 0, document_start))
        if len(units) > max_rows:
            target = (units[-1][2] - units[0][1]) / max_rows
            groups: list[list[tuple[str, int, int]]] = [[]]
            for unit in units:
                if groups[-1] and unit[2] - groups[-1][0][1] > target and len(groups) < max_rows:
                    groups.append([])
                groups[-1].append(unit)
            for group in groups:
                first, last = group[0][0][len(prefix):], group[-1][0][len(prefix):]
                label = group[0][0] if first == last else f"{prefix}{first}-{last}"
                segments.append(Segment(label, group[0][1], group[-1][2]))
        else:
            segments += [Segment(label, start, end) for label, start, end in units]
        if document_end < self.length:
            segments.append(Segment("question", document_end, self.length))
        return segments

    def top_passages(self, share: np.ndarray, count: int = 5, size: int = 60) -> list[Passage]:
        """The ``count`` non-overlapping runs of ``size`` document tokens (outside the window) most kept, best first."""
        start, end = self.prompt.document_span
        end = min(end, self.window[0])
        if end <= start:
            return []
        size = min(size, end - start)
        sums = np.concatenate([[0.0], np.cumsum(share[start:end], dtype=np.float64)])
        means = (sums[size:] - sums[:-size]) / size  # means[i]: tokens [start + i, start + i + size)
        available = np.ones(len(means), dtype=bool)
        passages: list[Passage] = []
        while len(passages) < count and available.any():
            best = int(np.argmax(np.where(available, means, -1.0)))
            passages.append(Passage(start + best, start + best + size, float(means[best])))
            available[max(0, best - size + 1): best + size] = False
        return passages

    # -- JSON --------------------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The ``snapkv inspect --json`` object (documented in docs/usage.md)."""
        report = self.report.to_json(answer=False)
        share_rows = {row["page"]: row for row in report["pages"]}
        layer_rows = {row["layer"]: row for row in report["layers"]}
        layers = []
        for row_index, layer in enumerate(self.layers):
            heads = []
            for head in range(self.num_heads):
                positions = np.flatnonzero(self.kept[row_index, head])
                scores = None
                if self.scored[row_index]:
                    scores = [_round(value) for value in self.scores[row_index, head, positions].tolist()]
                heads.append({"head": head, "kept": positions.tolist(), "scores": scores})
            row = layer_rows.get(layer, {})  # its "layer" is this layer: it keeps the first place below
            layers.append({"layer": layer, **row, "scored": self.scored[row_index], "heads": heads})
        pages = [
            {"page": page, "span": [start, end], "document_tokens": share_rows.get(page, {}).get("document_tokens"),
             "kept_share": share_rows.get(page, {}).get("kept_share")}
            for page, start, end in self.page_runs()
        ]
        data = {key: value for key, value in report.items() if key not in ("layers", "pages")}
        data["schema_version"] = SCHEMA_VERSION
        data.update({
            "token_ids": list(self.prompt.input_ids),
            "tokens": self.tokens,
            "window": list(self.window),
            "question_span": list(self.prompt.question_span),
            "document_span": list(self.prompt.document_span),
            "pages": pages,
            "layers": layers,
        })
        if self.answer is not None:
            data["answer"] = self.answer
            data["generated_tokens"] = self.generated_tokens
        return data


def _round(value: float) -> float | None:
    if not math.isfinite(value):
        return None
    return float(f"{value:.6g}")


def inspect_answer(answer, tokenizer, *, with_answer: bool = False) -> Inspection:
    """An :class:`Inspection` of a prefilled :class:`~snapkv_cli.answering.session.Answer` (batch 1)."""
    prompt = answer.prompt
    records = answer.result.cache.records
    layers = sorted(records)
    if not layers:
        raise UserError("the model recorded no layers: nothing to inspect")
    heads = records[layers[0]].kept_positions.shape[1]
    kept = np.zeros((len(layers), heads, prompt.length), dtype=bool)
    scores = np.full((len(layers), heads, prompt.length), np.nan, dtype=np.float32)
    scored = []
    for row, layer in enumerate(layers):
        record = records[layer]
        positions = record.kept_positions[0].cpu().numpy()  # (heads, kept)
        np.put_along_axis(kept[row], positions, True, axis=-1)
        if record.scores is not None:
            scores[row] = record.scores[0].float().cpu().numpy()
        scored.append(record.scores is not None)
    return Inspection(
        prompt=prompt,
        tokens=token_texts(tokenizer, prompt.input_ids),
        layers=layers,
        kept=kept,
        scores=scores,
        scored=scored,
        report=answer.report,
        answer=answer.result.answer if with_answer else None,
        generated_tokens=len(answer.result.generated_ids) if with_answer else None,
    )
