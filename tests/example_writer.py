"""``examples/make_examples.py`` (the hand-written PDF writer behind the example report), importable by tests."""

import importlib.util
from pathlib import Path

_PATH = Path(__file__).parent.parent / "examples" / "make_examples.py"
_spec = importlib.util.spec_from_file_location("make_examples", _PATH)
make_examples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_examples)
