"""Token counting for thresholds: strings, parts, messages, conversations (behaviour §7).

The public surface lives here; submodules hold one idea each (rounding, estimators, the estimate cache,
attachment heuristics, image headers, attachment bodies, the counter).
"""

from om_core.tokens.attachments import (
    IMAGE_EXTENSIONS,
    ModelContext,
    file_tokens,
    image_tokens,
    is_image_like_file,
    model_context,
)
from om_core.tokens.counter import CONVERSATION_OVERHEAD, MESSAGE_OVERHEAD, PartCount, TokenCounter
from om_core.tokens.estimators import (
    CACHE_VERSION,
    CharRatioEstimator,
    TextEstimator,
    TiktokenEstimator,
    default_estimator,
    ensure_offline_tiktoken_cache,
    estimator_source,
)
from om_core.tokens.image_size import image_dimensions
from om_core.tokens.rounding import round_half_up

__all__ = [
    "CACHE_VERSION",
    "CONVERSATION_OVERHEAD",
    "IMAGE_EXTENSIONS",
    "MESSAGE_OVERHEAD",
    "CharRatioEstimator",
    "ModelContext",
    "PartCount",
    "TextEstimator",
    "TiktokenEstimator",
    "TokenCounter",
    "default_estimator",
    "ensure_offline_tiktoken_cache",
    "estimator_source",
    "file_tokens",
    "image_dimensions",
    "image_tokens",
    "is_image_like_file",
    "model_context",
    "round_half_up",
]
