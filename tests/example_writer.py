"""``examples/make_examples.py`` (the hand-written PDF writer behind the example report), importable by tests."""

from examples import make_examples

__all__ = ["make_examples"]
