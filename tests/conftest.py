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
