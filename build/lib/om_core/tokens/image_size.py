"""Image dimensions from the first bytes of a file (PNG, JPEG, GIF, WebP, BMP, HEIC/AVIF).

Tile-based token heuristics need width and height. A full image decoder would be a heavy dependency for
two integers that every one of these formats stores in its header, so this reads just the header.
EXIF orientation is ignored: a rotated photo keeps its stored width/height, which only swaps the two
and rarely changes a tile count.
"""

from __future__ import annotations

import struct

Dimensions = tuple[int, int]

# SOFn markers carry the frame size; C4 (DHT), C8 (JPG extension) and CC (DAC) share the range but don't.
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset({0x01, 0xD8, *range(0xD0, 0xD8)})


def is_jpeg(head: bytes) -> bool:
    return head[:3] == b"\xff\xd8\xff"


def image_dimensions(head: bytes) -> Dimensions | None:
    """(width, height) from an image header, or None if the format is unknown or the header is cut."""
    try:
        dims = _dimensions(head)
    except struct.error:
        return None
    if dims is None or dims[0] <= 0 or dims[1] <= 0:
        return None
    return dims


def _dimensions(head: bytes) -> Dimensions | None:
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return _png(head)
    if head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
        return width, height
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(head)
    if is_jpeg(head):
        return _jpeg(head)
    if head[:2] == b"BM":
        return _bmp(head)
    if head[4:8] == b"ftyp":
        return _isobmff(head)
    return None


def _png(head: bytes) -> Dimensions | None:
    if head[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _webp(head: bytes) -> Dimensions | None:
    chunk = head[12:16]
    if chunk == b"VP8 ":
        if head[23:26] != b"\x9d\x01\x2a":
            return None
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        if head[20:21] != b"\x2f":
            return None
        (bits,) = struct.unpack("<I", head[21:25])
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        if len(head) < 30:
            return None
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    return None


def _jpeg(head: bytes) -> Dimensions | None:
    i = 2
    size = len(head)
    while i < size:
        if head[i] != 0xFF:
            return None
        while i < size and head[i] == 0xFF:  # fill bytes
            i += 1
        if i >= size:
            return None
        marker = head[i]
        i += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # end of image / start of scan: no frame header before it
            return None
        (length,) = struct.unpack(">H", head[i : i + 2])
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", head[i + 3 : i + 7])
            return width, height
        i += length
    return None


def _bmp(head: bytes) -> Dimensions | None:
    (header_size,) = struct.unpack("<I", head[14:18])
    if header_size == 12:
        width, height = struct.unpack("<HH", head[18:22])
        return width, height
    width, height = struct.unpack("<ii", head[18:26])
    return abs(width), abs(height)


def _isobmff(head: bytes) -> Dimensions | None:
    # HEIC/AVIF keep the size in an `ispe` property box: 4 bytes version/flags, then width, height.
    at = head.find(b"ispe")
    if at < 0:
        return None
    width, height = struct.unpack(">II", head[at + 8 : at + 16])
    return width, height
