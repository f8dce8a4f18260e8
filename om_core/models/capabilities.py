"""What litellm's model data says a model accepts as input.

`observeAttachments: "auto"` forwards images and files to the Observer only when its model accepts
multimodal input (behaviour §5.5). litellm ships a table of model capabilities, and an operator describes a
model it lacks with `litellm.register_model`; this module reads that table by the litellm name a router id
maps to. `litellm.supports_vision` is not used: it answers False for a model it has no entry for, which
would silently drop every attachment sent to a new or self-hosted model, where the spec says a model
without capability data gets them all.
"""

from __future__ import annotations

from typing import Any

from om_core.models.routing import route

__all__ = ["accepts_images"]


def accepts_images(router_id: str) -> bool | None:
    """True when litellm lists `router_id`'s model as taking images, False when it lists the model
    without that capability, None when litellm has no entry for it."""
    routed = route(router_id)
    provider, sep, _ = routed.litellm_model.partition("/")
    try:
        # Naming the provider keeps litellm from printing its provider list for a model it does not know.
        info = _litellm().get_model_info(routed.litellm_model, custom_llm_provider=provider if sep else None)
    except Exception:  # litellm raises its "not mapped" error (or a provider error) for unknown models
        return None
    return info.get("supports_vision") is True


def _litellm() -> Any:
    """litellm, imported when first asked (see `om_core.models.client._litellm`: it is slow to import)."""
    import litellm

    return litellm
