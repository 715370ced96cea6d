"""Helpers shared by the tests: a stand-in tokenizer and the check of a one-line ``Error:``."""

from __future__ import annotations

# Environment variables that would change what a run does; cleared before every test (conftest.clean_env).
RUN_ENVIRONMENT = ("SNAPKV_MODEL", "SNAPKV_DEBUG", "SNAPKV_DEVICE", "SNAPKV_PREFILL_CHUNK", "SNAPKV_CACHE_DOCS",
                   "SNAPKV_DOC_CACHE_MB", "SNAPKV_DEFAULT_MODEL_WHEEL", "SNAPKV_MAX_DOCUMENT_MB")


class DigitTokenizer:
    """Just enough of a tokenizer for ``generate_answer`` on tiny models: token ids decode to their digits."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)


def assert_user_error(result, *fragments: str, code: int = 1) -> str:
    """One ``Error: ...`` line on stderr that holds every fragment, nothing on stdout, no traceback, exit ``code``.

    Fragments may be split over lines by the console's wrapping; returns stderr.
    """
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.endswith("\n"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    squashed = " ".join(result.stderr.split())
    for fragment in fragments:
        assert fragment in result.stderr or fragment in squashed, (fragment, result.stderr)
    return result.stderr
