#!/usr/bin/env bash
# A virtual environment for llama.cpp through llama-cpp-python, built here from the registry's source distribution
# (GGML_NATIVE: the build uses what this CPU computes, AVX-512 included). Used only by
# tools/bench/peers/llamacpp_runner.py; llama-cpp-python is not a dependency of snapkv-cli. The build takes about
# 15 minutes on 2 cores.
#
#   bash tools/bench/peers/llamacpp_venv.sh [VENV]      # default: .venv-llamacpp in the repository root
set -euo pipefail
VENV=${1:-.venv-llamacpp}
LLAMA_CPP_PYTHON_VERSION=0.3.36   # the newest on PyPI when this was written
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_OPENMP=ON" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$VENV/bin/pip" install -q --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version
import llama_cpp
print("llama-cpp-python", version("llama-cpp-python"), "system info:", llama_cpp.llama_print_system_info().decode())
PY
