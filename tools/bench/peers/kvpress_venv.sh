#!/usr/bin/env bash
# A virtual environment for NVIDIA kvpress, apart from the project's (kvpress needs transformers < 5.3; the
# project runs on 5.24). Used only by tools/bench/peers/kvpress_runner.py; kvpress is not a dependency of snapkv-cli.
#
#   bash tools/bench/peers/kvpress_venv.sh [VENV]      # default: .venv-kvpress in the repository root
set -euo pipefail
VENV=${1:-.venv-kvpress}
KVPRESS_VERSION=0.5.5          # the newest on PyPI when this was written
TRANSFORMERS_VERSION=5.2.0     # the newest transformers kvpress 0.5.5 accepts (>=4.56, <5.3)
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0 "kvpress==$KVPRESS_VERSION" "transformers==$TRANSFORMERS_VERSION"
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version
print("kvpress", version("kvpress"), "transformers", version("transformers"), "torch", version("torch"))
PY
