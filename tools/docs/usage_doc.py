"""docs/usage.md's generated parts: every command and option of the Typer app, and the ``--json`` schemas.

:func:`command_index` and :func:`command_reference` walk the click command tree that Typer builds from
:data:`snapkv_cli.cli.app` and write, per command, what ``--help`` shows (description, usage line, arguments, then
the options grouped by their ``rich_help_panel`` in the order ``--help`` prints them), as plain Markdown: no Rich
markup, no terminal width. :func:`json_schema` lists the keys of ``snapkv ask --json`` (from the typed
:class:`~snapkv_cli.answering.report.Report` and its nested dataclasses) and of ``snapkv inspect --json`` (the
object :meth:`~snapkv_cli.answering.inspection.Inspection.to_json` makes of a small synthetic inspection), each key with
its type and the meaning written in :data:`MEANINGS`; a key the code adds shows up (without a meaning until one is
written: ``tests/test_usage_doc.py`` asks for it) and a key it drops disappears.

They are generators of ``tools/docs/tables.py``'s blocks (``<!-- generated: usage-index -->`` ...), so
``python -m tools.docs.tables --write`` rewrites them and ``--check`` fails when the doc has drifted.
"""

from __future__ import annotations

import inspect
import re
import typing
from dataclasses import fields, is_dataclass

PROGRAM = "snapkv"
ARGUMENTS_PANEL, OPTIONS_PANEL, COMMANDS_PANEL = "Arguments", "Options", "Commands"


# -- the command tree ----------------------------------------------------------------------------------------------

def _root(app=None):
    """The click command of ``app`` (default: the snapkv app) and its context, named ``snapkv``."""
    import typer

    if app is None:
        from snapkv_cli.cli import app
    command = typer.main.get_command(app)
    return command, command.context_class(command, info_name=PROGRAM, **command.context_settings)


def _walk(command, ctx):
    """``(path, command, ctx)`` for the command and every subcommand, depth first, in ``--help``'s order."""
    yield ctx.command_path.split()[1:], command, ctx
    for name in command.list_commands(ctx) if hasattr(command, "commands") else []:
        child = command.get_command(ctx, name)
        if child is not None and not child.hidden:
            yield from _walk(child, child.context_class(child, info_name=name, parent=ctx))


def _panel(thing, default: str) -> str:
    """The ``rich_help_panel`` of a parameter or command (Typer keeps an unset one as a falsy placeholder)."""
    panel = getattr(thing, "rich_help_panel", None)
    return getattr(panel, "value", panel) or default


def _grouped(items, default: str) -> dict[str, list]:
    """Items by panel: the default panel first, then the others in the order of their first item (as ``--help``)."""
    groups: dict[str, list] = {default: []}
    for item in items:
        groups.setdefault(_panel(item, default), []).append(item)
    return {name: members for name, members in groups.items() if members}


def _plain(text: str | None, command=None) -> str:
    """Help text as ``--help`` shows it, without styles: Rich markup resolved where the command uses it."""
    text = inspect.cleandoc(text or "").partition("\f")[0]
    if command is None or getattr(command, "rich_markup_mode", None) == "rich":
        from rich.text import Text

        text = Text.from_markup(text).plain
    return text


_MARKDOWN_SPECIALS = re.compile(r"([\\`*_<>\[\]|])")


def _escape(text: str) -> str:
    """Text that Markdown shows as it is, in a paragraph or a table cell."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text)


def _paragraphs(text: str) -> list[str]:
    """Help paragraphs as Markdown: single line breaks joined, an indented paragraph kept as a code block."""
    blocks = []
    for paragraph in text.split("\n\n"):
        lines = paragraph.split("\n")
        if all(line.startswith("    ") for line in lines if line.strip()):
            blocks.append("```\n" + inspect.cleandoc("\n".join(lines)) + "\n```")
        elif paragraph.strip():
            blocks.append(_escape(" ".join(line.strip() for line in lines if line.strip())))
    return blocks


def _summary(command) -> str:
    """A command's one-line description: its short help, or the first paragraph of its help."""
    text = command.short_help or _plain(command.help, command).split("\n\n")[0]
    return " ".join(text.split())


def _title(path: list[str]) -> str:
    return " ".join([PROGRAM, *path])


def anchor(title: str) -> str:
    """The anchor GitHub gives the heading ``### `title` ``."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _link(path: list[str]) -> str:
    return f"[`{_title(path)}`](#{anchor(_title(path))})"


def _value(param, ctx) -> str:
    """What an option or argument takes: its type (or metavar, or choices), its range, ``flag`` for a flag."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return "flag"
    if hasattr(param, "display_type"):  # Typer's own parameters (an argument's metavar is its name)
        own_name = param.param_type_name == "argument"
        kind = (None if own_name else param.metavar) or param.display_type(ctx).strip("<>")
        kind = kind.removesuffix(" range")
    else:
        kind = param.make_metavar(ctx)
    if kind.startswith("list[") and (param.multiple or param.nargs != 1):
        kind = kind[len("list["):-1]
    text = f"`{kind}`"
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None or high is not None:
        text += ", " + " and ".join(part for part in (f">= {low}" if low is not None else "",
                                                      f"<= {high}" if high is not None else "") if part)
    if param.multiple:
        text += ", repeatable"
    elif param.nargs != 1:
        text += ", several"
    return text


def _default(param, ctx) -> str:
    """The default ``--help`` states, or "" (no default shown): a flag's default as the flag that is in force."""
    if isinstance(param.show_default, str):
        return _escape(param.show_default)
    if not param.show_default and not ctx.show_default:
        return ""
    value = param.get_default(ctx, call=False)
    if callable(value):
        return "(dynamic)"
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            return f"`{(param.opts if value else param.secondary_opts)[0]}`"
        return "on" if value else ""
    if value is None or value == () or value == []:
        return ""
    values = value if isinstance(value, (list, tuple)) else [value]
    return ", ".join(f"`{getattr(item, 'value', item)}`" for item in values)


def _environment(param) -> str:
    envvar = param.envvar if getattr(param, "show_envvar", True) else None
    if not envvar:
        return ""
    return ", ".join(f"`{name}`" for name in ([envvar] if isinstance(envvar, str) else envvar))


def _spellings(param) -> list[str]:
    """An option's flags, long ones first as ``--help`` shows them (click may keep them in any order: a set)."""
    return sorted(param.opts, key=lambda flag: not flag.startswith("--")) + list(param.secondary_opts)


def _flags(param) -> str:
    return " / ".join(f"`{flag}`" for flag in _spellings(param))


def _argument_name(param) -> str:
    name = getattr(param, "display_name_raw", None) or param.metavar or param.name.upper()  # as --help names it
    return f"`{name}{'...' if param.metavar is None and param.nargs != 1 else ''}`"


def _cell(text: str) -> str:
    return text.replace("\n", " ") or " "


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _parameter_tables(command, ctx) -> list[str]:
    """The arguments' table, then one table per option panel, in ``--help``'s order."""
    shown = [param for param in command.get_params(ctx) if not getattr(param, "hidden", False)]
    arguments = [param for param in shown if param.param_type_name == "argument"]
    options = [param for param in shown if param.param_type_name == "option"]
    blocks = []
    for panel, members in _grouped(arguments, ARGUMENTS_PANEL).items():
        rows = [[_argument_name(param), _value(param, ctx), "yes" if param.required else "no", _default(param, ctx),
                 _escape(_plain(param.help, command))] for param in members]
        blocks.append(f"**{_escape(panel)}**\n\n" + _table(["argument", "value", "required", "default", "meaning"],
                                                           rows))
    for panel, members in _grouped(options, OPTIONS_PANEL).items():
        rows = [[_flags(param), _value(param, ctx), _default(param, ctx), _environment(param),
                 _escape(_plain(param.help, command)) + (" Required." if param.required else "")]
                for param in members]
        blocks.append(f"**{_escape(panel)}**\n\n" + _table(["option", "value", "default", "env var", "meaning"],
                                                           rows))
    return blocks


def _subcommand_tables(command, ctx, path: list[str]) -> list[str]:
    if not hasattr(command, "commands"):
        return []
    children = [command.get_command(ctx, name) for name in command.list_commands(ctx)]
    blocks = []
    for panel, members in _grouped([child for child in children if child and not child.hidden],
                                   COMMANDS_PANEL).items():
        rows = [[_link([*path, child.name]), _escape(_summary(child))] for child in members]
        blocks.append(f"**{_escape(panel)}**\n\n" + _table(["command", "what it does"], rows))
    return blocks


def command_index(app=None) -> str:
    """The contents: every command with its one-line description, then every option and the commands that take it."""
    root, ctx = _root(app)
    lines = []
    index: dict[str, list[list[str]]] = {}
    for path, command, context in _walk(root, ctx):
        depth = "  " * max(0, len(path) - 1)
        lines.append(f"{depth}- {_link(path)}: {_escape(_summary(command))}")
        for param in command.get_params(context):
            if param.param_type_name == "option" and not getattr(param, "hidden", False):
                index.setdefault(_spellings(param)[0], []).append(path)
    rows = [[_flags_of(flag, root, ctx), ", ".join(_link(path) for path in paths)]
            for flag, paths in sorted(index.items(), key=lambda item: item[0].lstrip("-").lower())]
    return ("\n".join(lines) + "\n\nEvery option, and the commands that take it:\n\n"
            + _table(["option", "commands"], rows))


def _flags_of(flag: str, root, ctx) -> str:
    """All the spellings of the option whose first flag is ``flag`` (from the first command that has it)."""
    for _, command, context in _walk(root, ctx):
        for param in command.get_params(context):
            if param.param_type_name == "option" and _spellings(param)[0] == flag:
                return _flags(param)
    return f"`{flag}`"


def command_reference(app=None) -> str:
    """Per command: a heading, its description, its usage line, its arguments and its options by panel."""
    root, ctx = _root(app)
    sections = []
    for path, command, context in _walk(root, ctx):
        usage = " ".join([_title(path), *command.collect_usage_pieces(context)])
        parts = [f"### `{_title(path)}`", *_paragraphs(_plain(command.help, command)), f"```\n{usage}\n```",
                 *_parameter_tables(command, context), *_subcommand_tables(command, context, path)]
        sections.append("\n\n".join(part.rstrip("\n") for part in parts) + "\n")
    return "\n".join(sections)


# -- the --json schemas --------------------------------------------------------------------------------------------

# What each key means, by its path (``a.b`` inside an object, ``a[].b`` inside each element of a list). A key that
# the code adds and that is missing here shows up in the doc with its type alone (the test asks for a meaning); one
# that the code drops disappears from the doc, and its entry here is reported as stale by the test.
MEANINGS = {
    "schema_version": "the schema's version (changes when a key changes meaning or goes away; new keys come without "
                      "a change)",
    "answer": "the answer text",
    "question": "the question",
    "document": "the document's path (`<stdin>` for stdin)",
    "model": "the model that ran",
    "device": "the device it ran on",
    "dtype": "the dtype of its weights, read back from the model",
    "dtype_reason": "why that dtype: \"asked for\" (--dtype), or \"auto: \" and the reason (a CPU that computes "
                    "bfloat16 natively, a GPU without bfloat16)",
    "quantization": "\"int8\" when the Linear layers' weights are int8 (--quantize int8, read back from the model), "
                    "else null",
    "method": "the compression method",
    "settings": "the compression settings as applied to this prompt",
    "settings.window_size": "observation window: the last prompt tokens that vote",
    "settings.max_capacity_prompt": "KV tokens kept per layer and KV head, resolved for this prompt",
    "settings.budget": "the budget as given (tokens, or a fraction of the prompt)",
    "settings.kernel_size": "pooling kernel size",
    "settings.pooling": "`avgpool` or `maxpool`",
    "settings.pooling_window": "`centered` or `causal`",
    "settings.gqa_aggregation": "how the query heads of a KV group combine their votes: `mean` or `max`",
    "settings.layer_budgets": "how the budget is split over layers, as it ran (the method's own unless set)",
    "settings.head_budgets": "how a layer's budget is split over KV heads, as it ran (the method's own unless set)",
    "settings.whole_words": "whether every token of a word is kept with the word's best one",
    "prompt_tokens": "prompt length in tokens",
    "prompt": "the prompt's parts and the observation window",
    "prompt.document": "document tokens",
    "prompt.question": "question tokens",
    "prompt.template": "template tokens",
    "prompt.window_size": "tokens in the observation window",
    "prompt.question_tokens_in_window": "question tokens inside the window",
    "prompt.question_tokens": "question tokens (as `prompt.question`)",
    "prompt.question_fits": "whether the whole question lies inside the window",
    "prompt.truncated_document_tokens": "document tokens cut out by `--truncate`",
    "prompt.template_name": "the template used (a base model gets its completion variant, e.g. `qa_base`)",
    "prompt.style": "`chat` (the model's chat template) or `completion` (plain text ending in `Answer:`)",
    "generated_tokens": "tokens generated",
    "cache": "the prompt's KV cache before and after compression",
    "cache.tokens_before": "prompt tokens before compression",
    "cache.tokens_after": "prompt tokens kept, mean per layer and KV head",
    "cache.tokens_allocated": "cache slots holding them, mean per layer and KV head (larger than `tokens_after` only "
                              "where KV heads keep different numbers and are padded)",
    "cache.bytes_before": "KV bytes before compression",
    "cache.bytes_after": "KV bytes allocated after compression, padding included",
    "cache.compression_ratio": "`bytes_before` / `bytes_after`",
    "cache.tokens_after_min": "the fewest prompt tokens any layer and KV head keeps",
    "cache.tokens_after_max": "the most prompt tokens any layer and KV head keeps",
    "layers": "one entry per layer",
    "layers[].layer": "the layer's index",
    "layers[].kept_tokens_min": "the fewest prompt tokens a KV head of this layer keeps",
    "layers[].kept_tokens_max": "the most prompt tokens a KV head of this layer keeps",
    "layers[].kept_tokens_mean": "prompt tokens kept, mean over the layer's KV heads",
    "layers[].capacity": "the layer's budget in tokens",
    "layers[].compressed": "whether the layer was compressed",
    "layers[].sliding_window": "whether it is a sliding-window layer",
    "pages": "one entry per document page (`[]` for a document without pages)",
    "pages[].page": "the page number",
    "pages[].document_tokens": "the page's prompt tokens",
    "pages[].kept_share": "share of its tokens kept over all layers and KV heads",
    "timings": "seconds",
    "timings.load_s": "loading the model",
    "timings.prefill_s": "the question's prefill (the whole prompt's when nothing was shared)",
    "timings.decode_s": "decoding the answer",
    "timings.decode_tokens_per_s": "decode rate",
    "timings.selection_s": "the part of the prefill spent choosing what to keep (window queries, scoring, gathering)",
    "timings.prefix_s": "building or loading a shared prefix for this answer (0 when prefilled in one pass or reused)",
    "timings.wall_s": "the answer's wall time, from its question to its report (prompt, prefix, prefill, decoding; "
                      "not the model's load)",
    "memory": "memory use",
    "memory.peak_rss_bytes": "peak resident memory of the process",
    "memory.cuda_peak_bytes": "peak CUDA memory allocated (null without CUDA)",
    "question_index": "the question's number among the questions of the run (from 0)",
    "reused_prefix_tokens": "prompt tokens taken from a prefix built before (of a prefix prefilled for this answer: "
                            "those it extended, `prefix.extended_tokens`)",
    "prefix": "the question-independent start of the prompt, shared by several questions",
    "prefix.tokens": "its tokens",
    "prefix.source": "`prefill` (prefilled for this answer), `memory` (reused from an earlier answer) or `disk` "
                     "(loaded from the document cache)",
    "prefix.seconds": "what building or loading it took",
    "prefix.extended_tokens": "of a prefix prefilled for this answer, the first tokens taken from another prefix held "
                              "in memory, which it extends (a server continuing a conversation); 0 otherwise",
    "doc_cache": "what the on-disk document cache (`--cache-docs`) did for this answer's prefix",
    "doc_cache.enabled": "whether the cache was on",
    "doc_cache.status": "`off`, `hit`, `stored`, `rebuilt` (a bad entry was replaced) or `not_stored`",
    "doc_cache.reason": "why, for `rebuilt` and `not_stored` (else null)",
    "doc_cache.path": "the entry's file (else null)",
    "doc_cache.bytes": "the entry's size (else null)",
    "stop": "where the answer ended and why",
    "stop.strings": "the stop strings in force (`[]` for an instruction-tuned model, which ends at its "
                    "end-of-sequence token)",
    "stop.stopped_by": "`eos`, `max_new_tokens`, `repetition`, or the stop string that ended the answer",
    "stop.reason": "`eos`, `stop_string`, `max_new_tokens` or `repetition`",
    "stop.stop_string": "the stop string that ended the answer, else null",
    "stop.stop_on_repeat": "whether a loop ends the answer (`--stop-on-repeat`)",
    "stop.repeated": "the text of the tokens that looped, else null",
    "decode_path": "with `--decode-weights bfloat16`: what the decoding steps ran and why (bfloat16 copies of the "
                   "Linear weights, attention and KV cache float32, the kernel setting), or why the weights as "
                   "loaded ran instead; else null",
}

# What ``snapkv inspect --json`` says differently, or adds.
INSPECT_MEANINGS = {
    "answer": "only with `--answer`: the answer text",
    "generated_tokens": "only with `--answer`: tokens generated",
    "token_ids": "the exact prompt token ids",
    "tokens": "the text of each token, decoded in context so that their concatenation gives back the prompt text (a "
              "token that ends inside a multi-byte character is `\"\"`, the next one carries the character)",
    "window": "the observation window, `[start, end)` prompt positions",
    "question_span": "`[start, end)` positions of the question",
    "document_span": "`[start, end)` positions of the document",
    "pages": "one entry per run of consecutive tokens on one document page; `[]` when the document was truncated "
             "(page boundaries are then unknown) or has no pages",
    "pages[].span": "`[start, end)` positions of the run",
    "layers[].scored": "whether the method scored this layer",
    "layers[].heads": "one entry per KV head",
    "layers[].heads[].head": "the KV head's index",
    "layers[].heads[].kept": "the prompt positions it kept, sorted",
    "layers[].heads[].scores": "the method's score of each kept position, in the same order (SnapKV: pooled window "
                               "votes; the window's positions carry their raw votes; 6 significant digits), or null "
                               "where nothing was scored (the prompt fits the budget, `--method full`, a "
                               "sliding-window layer)",
    "found": "only with `--find`: one entry per occurrence of each searched text",
    "found[].text": "the searched text",
    "found[].span": "`[start, end)` of the tokens covering it",
    "found[].heads_whole": "how many (layer, KV head) pairs kept all of those tokens",
    "found[].heads_part": "how many kept some of them",
    "found[].heads_none": "how many kept none",
    "found[].kept_per_head": "per layer, per KV head, how many of those tokens it kept",
}

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _plural(kind: str) -> str:
    return "arrays" + kind.removeprefix("array") if kind.startswith("array ") else kind + "s"


def _type_name(annotation) -> str:
    """A Python annotation as a JSON type: ``integer``, ``string or null``, ``array of integers``, ``object``."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple):
        return "array of " + _plural(_type_name(arguments[0]) if arguments else "value")
    if arguments:  # X | None, X | Y
        return " or ".join(_type_name(argument) for argument in arguments)
    if is_dataclass(annotation):
        return "object"
    return _JSON_TYPES.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _annotations(cls, prefix: str = "") -> dict[str, typing.Any]:
    """Every key path of a dataclass's JSON and its annotation, in field order (lists of dataclasses go inside; the
    settings block's keys are the declared settings')."""
    from snapkv_cli.answering.report import SettingsInfo

    paths = {}
    for field_ in fields(cls):
        annotation = typing.get_type_hints(cls)[field_.name]
        path = prefix + field_.name
        paths[path] = annotation
        inner = typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else annotation
        if inner is SettingsInfo:
            paths.update({f"{path}.{key}": type_ for key, type_ in SettingsInfo.declared_types().items()})
        elif is_dataclass(inner):
            paths.update(_annotations(inner, path + ("[]." if inner is not annotation else ".")))
    return paths


def _sample(annotation):
    """A value of this type: one element in each list, so that every key of a list's objects shows; a generation
    option declared with choices takes its first."""
    from snapkv_cli.answering.report import SettingsInfo

    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is SettingsInfo:
        return SettingsInfo({key: _sample(type_) for key, type_ in SettingsInfo.declared_types().items()})
    if is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)

        def value(field_):
            declared = field_.metadata.get("generation")
            return next(iter(declared.choices)) if declared and declared.choices else _sample(hints[field_.name])

        return annotation(**{field_.name: value(field_) for field_ in fields(annotation) if field_.init})
    if origin in (list, tuple):
        return [_sample(arguments[0])]
    if arguments:  # X | None, X | Y
        return _sample(next(argument for argument in arguments if argument is not type(None)))
    return annotation()


def _paths(value, prefix: str = "") -> list[tuple[str, object]]:
    """Every key path of a JSON value, in order, with the value found there (a list's first element stands for all)."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((prefix + key, item))
            if isinstance(item, dict):
                found += _paths(item, prefix + key + ".")
            elif isinstance(item, list) and item and isinstance(item[0], dict):
                found += _paths(item[0], prefix + key + "[].")
    return found


def _value_type(value) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array of " + _plural(_value_type(value[0]) if value else "value")
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _report_types() -> dict[str, str]:
    """The JSON type of every key path of the report: its fields' and, in ``stop``, the reported generation
    options' (:mod:`snapkv_cli.generation.options`), from their annotations."""
    from snapkv_cli.answering.report import Report
    from snapkv_cli.generation.options import GenerationOptions, generation_declarations

    options = typing.get_type_hints(GenerationOptions)
    annotations = {**_annotations(Report), **{f"stop.{declared.json or name}": options[name] for name, declared
                                              in generation_declarations().items() if declared.reported}}
    return {path: _type_name(annotation) for path, annotation in annotations.items()}


def ask_keys() -> list[tuple[str, str]]:
    """``snapkv ask --json``'s key paths, in the order ``Report.to_json`` writes them, and their JSON types (from the
    report's annotations)."""
    from snapkv_cli.answering.report import Report

    typed = _report_types()
    return [(path, typed.get(path) or _value_type(value)) for path, value in _paths(_sample(Report).to_json())]


def _sample_inspection():
    """A one-layer, one-head inspection of a two-token prompt, with an answer: its ``to_json`` has every key."""
    import numpy as np

    from snapkv_cli.answering.inspection import Inspection
    from snapkv_cli.answering.prompting import Prompt
    from snapkv_cli.answering.report import Report

    prompt = Prompt(text="ab", input_ids=[1, 2], document_span=(0, 1), question_span=(1, 2), token_pages=[1, None],
                    prefix_length=1)
    return Inspection(prompt=prompt, tokens=["a", "b"], layers=[0], kept=np.ones((1, 1, 2), dtype=bool),
                      scores=np.zeros((1, 1, 2), dtype=np.float32), scored=[True], report=_sample(Report), answer="",
                      generated_tokens=0)


def inspect_keys() -> list[tuple[str, str]]:
    """``snapkv inspect --json --answer --find TEXT``'s key paths and JSON types: the report's types where it
    has the key, the sample's value's type otherwise."""
    import numpy as np

    from snapkv_cli.answering.inspection import Occurrence

    data = _sample_inspection().to_json()
    data["found"] = [Occurrence("a", 0, 1, np.ones((1, 1), dtype=np.int64)).to_json()]  # --find's (cli/presenters.py)
    typed = _report_types()
    return [(path, typed.get(path) or _value_type(value)) for path, value in _paths(data)]


def _meaning(path: str, kind: str) -> str:
    if path == "schema_version":
        from snapkv_cli.answering import inspection, report

        version = (inspection if kind == "inspect" else report).SCHEMA_VERSION
        return f"`{version}`: " + MEANINGS[path]
    if kind == "inspect" and path in INSPECT_MEANINGS:
        return INSPECT_MEANINGS[path]
    return MEANINGS.get(path, "")


def json_schema(kind: str) -> str:
    """The table of ``snapkv ask --json`` (``kind`` ``ask``) or ``snapkv inspect --json`` (``inspect``) keys."""
    keys = {"ask": ask_keys, "inspect": inspect_keys}[kind]()
    rows = [[f"`{path}`", type_, _meaning(path, kind)] for path, type_ in keys]
    return _table(["key", "type", "meaning"], rows)


TABLES = {"usage-index": command_index, "usage-commands": command_reference, "json-schema": json_schema}
