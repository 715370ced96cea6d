import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated.*", category=FutureWarning)


@pytest.fixture(scope="session")
def llama():
    from tiny_models import tiny_model

    return tiny_model("llama")


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    """A tiny Llama with a byte-level tokenizer and chat template, saved as a model directory."""
    from tiny_models import save_tiny_model_dir

    return str(save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture(scope="session")
def short_context_model_path(tmp_path_factory):
    from tiny_models import save_tiny_model_dir

    return str(save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama-512"), max_position_embeddings=512))
