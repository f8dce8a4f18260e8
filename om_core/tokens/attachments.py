"""Token estimates for images and files (behaviour §7.3).

Images and files are not text: their cost depends on the provider that will read them (tiles, resolution
tiers, per-byte rates for PDFs). These heuristics run locally on whatever the part says about itself
(dimensions, size, mime type) so thresholds react to attachments without calling any provider. Remote URLs
are never fetched; an attachment known only by URL gets the heuristic's "unknown" value or, for
non-image files, the size of its JSON descriptor.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from om_core.messages import Part
from om_core.tokens.body import EMPTY_BODY, Body, classify_body
from om_core.tokens.image_size import Dimensions, image_dimensions, is_jpeg
from om_core.tokens.rounding import round_half_up

Family = Literal["openai", "anthropic", "google"]

#: Metadata namespaces read for OM's own keys; the first one is where OM writes.
NAMESPACES = ("om", "mastra")

IMAGE_EXTENSIONS = frozenset(
    {"png", "jpg", "jpeg", "webp", "gif", "bmp", "tiff", "tif", "heic", "heif", "avif"}
)

_GOOGLE_PROVIDERS = frozenset({"google", "gemini", "vertex", "vertex_ai", "google-vertex", "vertex_ai_beta"})
_ANTHROPIC_PROVIDERS = frozenset({"anthropic"})
_OPENAI_PROVIDERS = frozenset({"openai", "azure", "azure_ai", "openai-compatible"})

KIB = 1024
MIB = 1024 * KIB

_HEADER_BYTES = 64 * KIB


# --------------------------------------------------------------------------------------------------
# Model context


@dataclass(frozen=True, slots=True)
class ModelContext:
    """Which provider's heuristics apply, and the bare model id they key on."""

    family: Family
    model_id: str


def model_context(model: str | None) -> ModelContext:
    """Parse `"provider/model-id"`; unknown or missing providers fall back to the model id, then OpenAI."""
    if not model:
        return ModelContext("openai", "")
    segments = [s for s in model.strip().lower().split("/") if s]
    if not segments:
        return ModelContext("openai", "")
    model_id = segments[-1]
    for provider in segments[:-1]:
        if provider in _GOOGLE_PROVIDERS:
            return ModelContext("google", model_id)
        if provider in _ANTHROPIC_PROVIDERS:
            return ModelContext("anthropic", model_id)
        if provider in _OPENAI_PROVIDERS:
            return ModelContext("openai", model_id)
    if model_id.startswith("gemini"):
        return ModelContext("google", model_id)
    if "claude" in model_id:
        return ModelContext("anthropic", model_id)
    return ModelContext("openai", model_id)


# --------------------------------------------------------------------------------------------------
# Provider heuristics


def _scaled(dims: Dimensions, factor: float) -> Dimensions:
    return max(1, round_half_up(dims[0] * factor)), max(1, round_half_up(dims[1] * factor))


def _openai_params(model_id: str) -> tuple[int, int, int]:
    """(base tokens, tokens per tile, tiles assumed when nothing is known)."""
    if model_id.startswith("gpt-5"):
        return 70, 140, 4
    if model_id.startswith("gpt-4o-mini"):
        return 2833, 5667, 1
    if model_id.startswith(("o1", "o3")):
        return 75, 150, 4
    if "computer-use" in model_id:
        return 65, 129, 4
    return 85, 170, 4


def _openai_detail(detail: str | None, dims: Dimensions | None, byte_size: int | None) -> str:
    if detail in ("low", "high"):
        return detail
    if dims is not None:
        return "high" if max(dims) > 768 else "low"
    if byte_size is not None:
        return "high" if byte_size > MIB else "low"
    return "low"


def _openai_high_tiles(dims: Dimensions | None, byte_size: int | None, fallback_tiles: int) -> int:
    if dims is not None:
        if max(dims) > 2048:
            dims = _scaled(dims, 2048 / max(dims))
        if min(dims) > 768:
            dims = _scaled(dims, 768 / min(dims))
        return math.ceil(dims[0] / 512) * math.ceil(dims[1] / 512)
    if byte_size is None:
        return fallback_tiles
    if byte_size <= 512 * KIB:
        return 1
    if byte_size <= 2 * MIB:
        return 4
    if byte_size <= 4 * MIB:
        return 6
    return 8


def openai_image_tokens(
    model_id: str, detail: str | None, dims: Dimensions | None, byte_size: int | None
) -> int:
    base, per_tile, fallback_tiles = _openai_params(model_id)
    if _openai_detail(detail, dims, byte_size) == "low":
        return base
    return base + _openai_high_tiles(dims, byte_size, fallback_tiles) * per_tile


def anthropic_image_tokens(dims: Dimensions | None, byte_size: int | None) -> int:
    if dims is not None:
        if max(dims) > 1568:
            dims = _scaled(dims, 1568 / max(dims))
        return max(1, math.ceil(dims[0] * dims[1] / 750))
    if byte_size is None:
        return 1600
    if byte_size <= 512 * KIB:
        return 341
    if byte_size <= 2 * MIB:
        return 1366
    if byte_size <= 4 * MIB:
        return 2048
    return 2731


_GEMINI3_RESOLUTION_TOKENS = {"low": 280, "medium": 560, "high": 1120, "ultra_high": 2240}


def google_image_tokens(model_id: str, dims: Dimensions | None, media_resolution: str | None) -> int:
    if model_id.startswith("gemini-3"):
        return _GEMINI3_RESOLUTION_TOKENS.get(media_resolution or "", 1120)
    tiles = math.ceil(dims[0] / 768) * math.ceil(dims[1] / 768) if dims is not None else 1
    return tiles * 258


def image_tokens(
    ctx: ModelContext,
    dims: Dimensions | None,
    byte_size: int | None,
    detail: str | None = None,
    media_resolution: str | None = None,
) -> int:
    """Provider-aware image estimate (behaviour §7.3, image heuristics)."""
    if ctx.family == "google":
        return google_image_tokens(ctx.model_id, dims, media_resolution)
    if ctx.family == "anthropic":
        return anthropic_image_tokens(dims, byte_size)
    return openai_image_tokens(ctx.model_id, detail, dims, byte_size)


def is_pdf(mime_type: str | None, name: str | None) -> bool:
    """By mime type; the file name only decides when no mime type is known."""
    if mime_type:
        return mime_type in ("application/pdf", "application/x-pdf")
    return name is not None and name.lower().endswith(".pdf")


def file_tokens(ctx: ModelContext, mime_type: str | None, byte_size: int, name: str | None = None) -> int:
    """Byte heuristic for a non-image file whose size is known."""
    if is_pdf(mime_type, name):
        if ctx.family == "google":
            return max(258, math.ceil(byte_size / 20))
        if ctx.family == "anthropic":
            return max(1500, math.ceil(byte_size / 3))
        return max(500, math.ceil(byte_size / 4))
    return max(1, math.ceil(byte_size / 4))


# --------------------------------------------------------------------------------------------------
# Attachment view: one shape for image/file parts and for attachment blocks inside tool results


@dataclass(frozen=True, slots=True)
class Attachment:
    kind: Literal["image", "file"]
    body: Body
    mime_type: str | None
    filename: str | None
    url: str | None
    detail: str | None
    media_resolution: str | None
    stated_dimensions: Dimensions | None
    provider_metadata: Mapping[str, Any]


def normalize_mime(mime: object) -> str | None:
    if not isinstance(mime, str):
        return None
    return mime.split(";", 1)[0].strip().lower() or None


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _ns_value(metadata: Mapping[str, Any], key: str) -> Any:
    """First value of `key` in OM's metadata namespaces (`om`, then `mastra`)."""
    for namespace in NAMESPACES:
        value = _dict(metadata.get(namespace)).get(key)
        if value is not None:
            return value
    return None


def _positive_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value) and value > 0:
        return int(value)
    return None


def _pair(width: object, height: object) -> Dimensions | None:
    w, h = _positive_int(width), _positive_int(height)
    return (w, h) if w is not None and h is not None else None


def _first_str(*values: object) -> str | None:
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def _detail(*values: object) -> str | None:
    raw = _first_str(*values)
    return raw.lower() if raw else None


def _resolution(*values: object) -> str | None:
    raw = _first_str(*values)
    if raw is None:
        return None
    normalized = raw.lower().removeprefix("media_resolution_")
    return normalized.replace("-", "_")


def _body_and_url(data: object, url: object) -> tuple[Body, str | None]:
    body = classify_body(data) if data is not None else EMPTY_BODY
    if body is EMPTY_BODY and isinstance(url, str) and url:
        body = classify_body(url)
    return body, body.remote_url or (url if isinstance(url, str) and url else None)


def attachment_from_part(part: Part) -> Attachment:
    metadata = _dict(part.provider_metadata)
    body, url = _body_and_url(part.data, part.url)
    dims = _pair(part.width, part.height) or _pair(
        _ns_value(metadata, "imageWidth"), _ns_value(metadata, "imageHeight")
    )
    openai = _dict(metadata.get("openai"))
    return Attachment(
        kind="image" if part.type == "image" else "file",
        body=body,
        mime_type=normalize_mime(part.mime_type) or body.media_type,
        filename=part.filename,
        url=url,
        detail=_detail(
            part.detail, openai.get("detail"), openai.get("imageDetail"), _ns_value(metadata, "imageDetail")
        ),
        media_resolution=_resolution(
            _dict(metadata.get("google")).get("mediaResolution"), _ns_value(metadata, "mediaResolution")
        ),
        stated_dimensions=dims,
        provider_metadata=metadata,
    )


def attachment_from_block(block: Mapping[str, Any], kind: Literal["image", "file"]) -> Attachment:
    """A tool-result content block (`image`, `image-data`, `media`, `audio`, `file-data`) as an attachment."""
    options = _dict(block.get("providerOptions"))
    # Blocks carry OM keys (client estimates, dimensions) in either place; providerMetadata wins a tie.
    metadata = {**options, **_dict(block.get("providerMetadata"))}
    data = next((block[k] for k in ("data", "image", "file") if block.get(k) is not None), None)
    body, url = _body_and_url(data, block.get("url"))
    openai = _dict(options.get("openai")) or _dict(metadata.get("openai"))
    return Attachment(
        kind=kind,
        body=body,
        mime_type=normalize_mime(block.get("mediaType") or block.get("mimeType")) or body.media_type,
        filename=_first_str(block.get("filename"), block.get("name")),
        url=url,
        detail=_detail(
            block.get("detail"),
            block.get("imageDetail"),
            openai.get("detail"),
            openai.get("imageDetail"),
            _ns_value(metadata, "imageDetail"),
        ),
        media_resolution=_resolution(
            block.get("mediaResolution"),
            _dict(options.get("google")).get("mediaResolution"),
            _ns_value(metadata, "mediaResolution"),
        ),
        stated_dimensions=_pair(block.get("width"), block.get("height"))
        or _pair(block.get("imageWidth"), block.get("imageHeight")),
        provider_metadata=metadata,
    )


def _url_path_name(url: str | None) -> str | None:
    """The decoded last path segment of a URL (None for data: URIs and bare paths ending in '/')."""
    if not url or url[:5].lower() == "data:":
        return None
    segment = urlsplit(url).path.rsplit("/", 1)[-1]
    return unquote(segment) or None


def _has_image_extension(name: str | None) -> bool:
    if not name or "." not in name:
        return False
    return name.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS


def is_image_like_file(
    mime_type: str | None, data: object = None, url: str | None = None, filename: str | None = None
) -> bool:
    """§5.5: image mime, a `data:image/...` URI, or a URL path / filename with an image extension."""
    if mime_type and mime_type.strip().lower().startswith("image/"):
        return True
    for candidate in (data, url):
        if isinstance(candidate, str) and candidate[:11].lower() == "data:image/":
            return True
    for candidate in (url, data if isinstance(data, str) and "://" in data[:64] else None):
        if _has_image_extension(_url_path_name(candidate)):
            return True
    return _has_image_extension(filename)


def _attachment_is_image_like(att: Attachment) -> bool:
    return (
        (att.mime_type or "").startswith("image/")
        or (att.body.media_type or "").startswith("image/")
        or _has_image_extension(_url_path_name(att.url))
        or _has_image_extension(att.filename)
    )


# --------------------------------------------------------------------------------------------------
# Planning: what to count, and what identifies the estimate for the cache


@dataclass(frozen=True, slots=True)
class AttachmentPlan:
    """One attachment estimate: either `fixed_tokens` or `text` to run through the text estimator.

    `payload` describes every input of the estimate, so its hash keys the cache entry.
    `decoded_dimensions` is set when the header was decoded here (worth persisting on the part).
    """

    kind: str
    payload: str
    fixed_tokens: int | None = None
    text: str | None = None
    decoded_dimensions: Dimensions | None = None


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _decode_dimensions(body: Body) -> Dimensions | None:
    head = body.head(_HEADER_BYTES)
    dims = image_dimensions(head)
    if dims is None and is_jpeg(head) and len(head) >= _HEADER_BYTES:
        # Large EXIF/ICC segments can push a JPEG's frame header past the first read.
        size = body.byte_size or 0
        dims = image_dimensions(body.head(size)) if size > _HEADER_BYTES else None
    return dims


def plan_attachment(att: Attachment, ctx: ModelContext) -> AttachmentPlan:
    """Decide how an image/file attachment is estimated (behaviour §7.3 steps 2–4, client estimates aside)."""
    if att.kind == "image" or _attachment_is_image_like(att):
        return _plan_image(att, ctx)
    byte_size = att.body.byte_size
    name = att.filename or _url_path_name(att.url)
    if byte_size is not None:
        inputs = {
            "provider": ctx.family,
            "model": ctx.model_id,
            "mime": att.mime_type,
            "bytes": byte_size,
            "filename": name,
        }
        return AttachmentPlan(
            "non-image-file", _compact(inputs), fixed_tokens=file_tokens(ctx, att.mime_type, byte_size, name)
        )
    descriptor = json.dumps(
        {"type": "file", "mimeType": att.mime_type, "filename": name},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return AttachmentPlan("file-descriptor", descriptor, text=descriptor)


def _plan_image(att: Attachment, ctx: ModelContext) -> AttachmentPlan:
    dims = att.stated_dimensions or _pair(*_stored_dimensions(att.provider_metadata))
    decoded = None
    if dims is None and att.body.measurable:
        decoded = dims = _decode_dimensions(att.body)
    byte_size = att.body.byte_size
    inputs = {
        "provider": ctx.family,
        "model": ctx.model_id,
        "detail": att.detail,
        "resolution": att.media_resolution,
        "width": dims[0] if dims else None,
        "height": dims[1] if dims else None,
        "bytes": byte_size,
        "mime": att.mime_type,
        "filename": att.filename,
    }
    tokens = image_tokens(ctx, dims, byte_size, att.detail, att.media_resolution)
    kind = "image" if att.kind == "image" else "image-like-file"
    return AttachmentPlan(kind, _compact(inputs), fixed_tokens=tokens, decoded_dimensions=decoded)


def _stored_dimensions(metadata: Mapping[str, Any]) -> tuple[object, object]:
    stored = _dict(_ns_value(metadata, "imageDimensions"))
    return stored.get("width"), stored.get("height")
