"""Where a benchmark result came from: the code (git commit), the machine, the libraries, the command, the load.

Every benchmark JSON carries this, so a number in ``docs/`` can be traced to the code and machine that produced it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

_REPOSITORY = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=_REPOSITORY, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


_CODE = ("snapkv_cli", "prompts", "pyproject.toml")  # what a benchmark runs (docs edits do not change results)


def git_state() -> dict:
    """The commit of the code that ran and whether the code (``_CODE``) differed from it (None outside a checkout)."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no", "--", *_CODE) if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


# the CPU features a CPU speed number depends on: the widest vector unit and the native low-precision dot products
# (two hosts both named "AMD EPYC" can differ in them, and bfloat16 or llama.cpp speeds with them)
VECTOR_FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16",
                   "asimd", "bf16", "i8mm", "sve")


def cpu_vector_features() -> list[str]:
    """Which of :data:`VECTOR_FEATURES` this CPU lists (``/proc/cpuinfo``; empty where it cannot be read)."""
    from snapkv_cli.models.cpu_features import cpuinfo_flags

    flags = cpuinfo_flags()
    return [name for name in VECTOR_FEATURES if name in flags]


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_start() -> dict:
    """What is known when a run starts: the code's commit (before anything can change it), the time, the load."""
    return {"git": git_state(), "started": now(), "load_average_before": load_average()}


def write_result(path: Path, kind: str, args, provenance: dict, **body) -> None:
    """Write a benchmark script's result JSON: ``schema_version`` 2, its ``kind``, the script's parsed ``args`` (paths
    as strings), its :func:`provenance`, then ``body``'s keys."""
    report = {"schema_version": 2, "kind": kind, "args": vars(args), "provenance": provenance, **body}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")


def provenance(loaded, start: dict) -> dict:
    """The code, machine, libraries and command of a run begun with ``start`` (:func:`run_start`) and ending now.

    ``loaded`` is the run's model (None where the model ran in child processes that report it themselves)."""
    import torch
    import transformers

    return {
        **start,
        "command": " ".join(["snapkv", *sys.argv[1:]]) if Path(sys.argv[0]).name == "snapkv" else " ".join(sys.argv),
        "finished": now(),
        "load_average_after": load_average(),
        "machine": {"platform": platform.platform(), "cpu": _cpu_model(),
                    "cpu_features": cpu_vector_features(), "cpus": os.cpu_count(),
                    "memory_bytes": _memory_bytes(), "python": platform.python_version(),
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "torch_threads": torch.get_num_threads()},
        "model": None if loaded is None else {
            "name": loaded.name, "source": str(loaded.source), "device": str(loaded.device),
            "dtype": str(loaded.dtype).removeprefix("torch."),
            "dtype_reason": getattr(loaded, "dtype_reason", None),
            "quantization": getattr(loaded, "quantization", None)},
    }
