import os
import signal
import threading
import warnings

import pytest

from tests.helpers import RUN_ENVIRONMENT

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated.*", category=FutureWarning)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No test sees the developer's own snapkv settings (model, device, debug, document cache...)."""
    for name in RUN_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True, scope="session")
def cpu_without_native_bf16():
    """``--dtype auto`` on a CPU picks bfloat16 where the CPU computes it natively: every test sees a CPU without it
    (float32, as the tests' expected numbers assume), so that results do not depend on the machine that runs them.
    Session-wide, so that models loaded by module-scoped fixtures see it too; tests/test_weight_dtype.py puts a
    bfloat16 CPU back where it tests the choice."""
    from snapkv_cli.models import cpu_features

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_features, "native_bf16_feature", lambda *args, **kwargs: None)
        yield


@pytest.fixture(autouse=True)
def no_timed_progress_lines(monkeypatch):
    """Off a terminal, progress lines depend on time (one every few seconds, none in a run's first seconds): no test
    sees them unless it asks for them (tests/test_progress.py), so that stderr checks do not depend on the machine's
    speed."""
    from snapkv_cli.views import progress_display

    monkeypatch.setattr(progress_display, "LINE_INTERVAL_S", float("inf"))


@pytest.fixture
def deadline(request):
    """``deadline(seconds)``: the test fails if it has not finished ``seconds`` from now, rather than wait forever. Made
    for code that waits in a library that only listens to Ctrl-C (Ray's ``wait`` and ``get``): at the deadline the
    test gets a SIGINT, which :func:`pytest_runtest_call` below turns into this test's failure instead of an
    interrupted session."""
    timers = []
    # Ctrl-C's own handler, even where the test process was started with SIGINT ignored (a background job)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def start(seconds: float) -> None:
        def expire() -> None:
            request.node.missed_deadline = seconds
            os.kill(os.getpid(), signal.SIGINT)

        timers.append(threading.Timer(seconds, expire))
        timers[-1].daemon = True
        timers[-1].start()

    yield start
    for timer in timers:
        timer.cancel()
    signal.signal(signal.SIGINT, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    except KeyboardInterrupt:
        seconds = getattr(item, "missed_deadline", None)
        if seconds is None:
            raise
        pytest.fail(f"not finished within its {seconds:g} s deadline", pytrace=False)


@pytest.fixture
def doc_cache_dir(monkeypatch, tmp_path):
    """The document cache in this test's own directory (``SNAPKV_DOC_CACHE_DIR``)."""
    monkeypatch.setenv("SNAPKV_DOC_CACHE_DIR", str(tmp_path / "doc-cache"))
    return tmp_path / "doc-cache"


@pytest.fixture
def one_thread():
    """One intra-op thread: the tiny model gains nothing from more, and on a busy machine their waits cost 50x
    (3x for the default model)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def llama():
    from tests.tiny_models import tiny_model

    return tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A tiny Llama with a byte-level tokenizer and chat template, saved as a model directory."""
    from tests.tiny_models import save_tiny_model_dir

    return str(save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture(scope="session")
def short_context_model_path(tmp_path_factory):
    from tests.tiny_models import save_tiny_model_dir

    return str(save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama-512"), max_position_embeddings=512))


@pytest.fixture
def notes(request, tmp_path) -> str:
    """The test module's ``NOTES`` text written to ``notes.txt`` in the test's own directory; returns its path."""
    path = tmp_path / "notes.txt"
    path.write_text(request.module.NOTES, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def loaded(tiny_model_path):
    """The tiny model (``tiny_model_path``) loaded on the CPU, once per test module (in float32:
    :func:`cpu_without_native_bf16`)."""
    from snapkv_cli.models.loader import load_model

    return load_model(tiny_model_path, device="cpu")


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny byte-level tokenizer with a chat template (tests.tiny_models), shared by the prompt and task tests."""
    from tests.tiny_models import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def template():
    """The default prompt template from prompts/."""
    from snapkv_cli.answering.prompting import load_template

    return load_template()


@pytest.fixture
def conversions(monkeypatch, tiny_model_path):
    """The transformers conversion of a GGUF replaced by a copy of the tiny model directory (fast, no real GGUF);
    records the bytes of each GGUF it was given."""
    import shutil
    from pathlib import Path

    from snapkv_cli.models import conversion

    seen: list[bytes] = []

    def fake_convert(gguf: Path, out_dir: Path, say) -> dict:
        seen.append(Path(gguf).read_bytes())
        for item in Path(tiny_model_path).iterdir():
            shutil.copy(item, out_dir / item.name)
        return {"dtype": "float32"}

    monkeypatch.setattr(conversion, "convert_gguf", fake_convert)
    return seen


def pytest_collection_finish(session):
    """Under mutation testing (tools/bench/mutation.py sets ``SNAPKV_MUTATION_WARMUP``) the process that forks each
    mutant's tests warms up once after collecting them (tests/tiny_models.py, ``warm_up``); forked runs inherit it."""
    global _warmed_up
    if os.environ.get("SNAPKV_MUTATION_WARMUP") and not _warmed_up:
        from tests.tiny_models import warm_up

        warm_up()
        _warmed_up = True


_warmed_up = False


def pytest_collection_modifyitems(config, items):
    """Under mutation testing (mutmut names the mutant in ``MUTANT_UNDER_TEST`` and stops at a mutant's first failing
    test), the tests that start a real Ray cluster (20-30 s each) run after the others, which catch most mutants of
    the batch code in about a second each. The order of the rest is kept."""
    if os.environ.get("MUTANT_UNDER_TEST"):
        items.sort(key=lambda item: "cluster" in getattr(item, "fixturenames", ()))
