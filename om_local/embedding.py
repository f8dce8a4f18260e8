"""`om-local/hashing-embedding`: an offline, deterministic text embedder (feature hashing).

What it is: each word of the text (lower-cased, split at anything that is not a letter or digit) and each
character trigram of each word is hashed into one of `DIMENSIONS` buckets with a hashed sign; counts are
damped (`1 + log(count)`), trigrams weigh half a word, and the vector is scaled to unit length. Two texts
are close when they share words and word fragments, so the vector search of the demo and the tests works
with no key and no network, gives the same answer on every run, and catches spelling variants and
inflections a lexical index misses ("invoices" near "invoice").

What it is not: a model of meaning. It knows no synonyms and no paraphrase ("car" is no closer to
"automobile" than to "banana"), and it has no notion of language. For semantic search configure a real
embedding model (`OM_EMBEDDING_MODEL`, e.g. `openai/text-embedding-3-small`).
"""

from __future__ import annotations

import math
import re
from collections import Counter

import xxhash

#: The model id under the local provider: `om-local/hashing-embedding`.
MODEL_ID = "hashing-embedding"
#: The vector size. Small enough for fast exact and HNSW search, large enough that hash collisions between
#: a text's few hundred features stay rare.
DIMENSIONS = 256
#: Weight of one character trigram relative to one word.
TRIGRAM_WEIGHT = 0.5

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _features(text: str) -> Counter[str]:
    features: Counter[str] = Counter()
    for word in _WORD.findall(text.lower()):
        features["w:" + word] += 1
        padded = f"^{word}$"
        for start in range(len(padded) - 2):
            features["g:" + padded[start : start + 3]] += 1
    return features


def hashing_embedding(text: str, dims: int = DIMENSIONS) -> list[float]:
    """The unit-length feature-hashing vector of `text` (all zeros for a text with no word)."""
    vector = [0.0] * dims
    for feature, count in _features(text).items():
        digest = xxhash.xxh64_intdigest(feature.encode())
        bucket = digest % dims
        sign = 1.0 if (digest >> 63) & 1 else -1.0
        weight = (1.0 + math.log(count)) * (TRIGRAM_WEIGHT if feature[0] == "g" else 1.0)
        vector[bucket] += sign * weight
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm > 0 else vector
