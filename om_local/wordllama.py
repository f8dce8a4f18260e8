"""`om-local/wordllama-256`: the offline semantic embedder, WordLlama's token embeddings read from its wheel.

What it is: WordLlama (`wordllama` on PyPI, MIT licence) ships in its wheel a 32,000 × 256 table of token
embeddings distilled from Llama 2 70B's input embeddings and trained for sentence similarity
(`weights/l2_supercat_256.safetensors`, 16 MB of float16), with the Llama 2 tokenizer
(`tokenizers/l2_supercat_tokenizer_config.json`). A text's vector is the mean of its tokens' rows, scaled to
unit length: WordLlama's own inference (average pooling). Texts are close when they mean related things,
not only when they share words ("my dog" is near "a beagle named Rufus"); it is still a bag of tokens (no
word order, no negation), a long way from a transformer encoder, and about 20 µs per short text on one core.

Why not `wordllama.WordLlama.load()`: the package's loader looks for the tokenizer under `tokenizer/`
while the wheel has it under `tokenizers/`, so it downloads it from the Hugging Face hub (which fails with no
network), and importing the package calls `logging.basicConfig` on the root logger. This module reads the
two files of the installed package directly, with `safetensors` and `tokenizers` (the package's own
dependencies), and never imports `wordllama` nor opens a connection.

The table is loaded on the first call, once per process (about 0.2 s and 16 MB), so a process that never
embeds never pays for it. Raises `WordLlamaUnavailable` when the package or its files are missing.
"""

from __future__ import annotations

import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The model id under the local provider: `om-local/wordllama-256`.
MODEL_ID = "wordllama-256"
#: The vector size (the wheel's Matryoshka table at its 256-dimension cut).
DIMENSIONS = 256
#: The distribution that carries the weights.
PACKAGE = "wordllama"
WEIGHTS_FILE = Path("weights") / "l2_supercat_256.safetensors"
TOKENIZER_FILE = Path("tokenizers") / "l2_supercat_tokenizer_config.json"
_TENSOR = "embedding.weight"


class WordLlamaUnavailable(RuntimeError):
    """The `wordllama` package, or one of the files this module reads from it, is not installed."""


@dataclass(frozen=True)
class _Model:
    table: np.ndarray[Any, np.dtype[np.float16]]
    tokenizer: Any  # tokenizers.Tokenizer (the library ships no type information)


_lock = threading.Lock()
_loaded: _Model | None = None


def package_dir() -> Path | None:
    """Where the installed `wordllama` package lives, found without importing it; None when missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _load() -> _Model:
    root = package_dir()
    if root is None:
        raise WordLlamaUnavailable(
            f"om-local/{MODEL_ID} needs the {PACKAGE} package (pip install {PACKAGE}); "
            "or set OM_EMBEDDING_MODEL=om-local/hashing-embedding"
        )
    weights, tokenizer_file = root / WEIGHTS_FILE, root / TOKENIZER_FILE
    for path in (weights, tokenizer_file):
        if not path.is_file():
            raise WordLlamaUnavailable(f"om-local/{MODEL_ID}: {path} is missing from the installed {PACKAGE}")
    from safetensors import safe_open
    from tokenizers import Tokenizer

    with safe_open(str(weights), framework="np") as handle:
        table = handle.get_tensor(_TENSOR)
    if table.ndim != 2 or table.shape[1] != DIMENSIONS:
        raise WordLlamaUnavailable(f"om-local/{MODEL_ID}: {weights} holds a table of shape {table.shape}")
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return _Model(np.ascontiguousarray(table, dtype=np.float16), tokenizer)


def model() -> _Model:
    """The loaded table and tokenizer: read on the first call, then kept for the process."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
    return _loaded


def wordllama_embeddings(texts: list[str]) -> list[list[float]]:
    """The unit-length vector of each text (all zeros for a text with no token)."""
    loaded = model()
    rows = loaded.table.shape[0]
    vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    for i, text in enumerate(texts):
        # One text at a time: `encode_batch` would start a thread pool per process (and warn after a fork).
        ids = np.asarray(loaded.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)
        if ids.size:
            vectors[i] = loaded.table[np.clip(ids, 0, rows - 1)].astype(np.float32).mean(axis=0)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    result: list[list[float]] = vectors.tolist()
    return result
