"""PNG thumbnails of items that are greyscale images, and the bounded cache that keeps them.

The console shows gallery items whose features are pixels (``image_shape``, see
:mod:`oahu.streams.image_shape`) as pictures. A thumbnail is the feature vector drawn as a
greyscale image of that shape, enlarged by nearest-neighbour sampling so that each feature stays
a sharp square (a digit's 8 x 8 pixels are the point, not a blur of them).
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np
from PIL import Image

__all__ = ["ThumbnailCache", "grey_levels", "render_thumbnail"]

MIN_SIZE, MAX_SIZE = 16, 256  # pixels on the thumbnail's longer side


def grey_levels(x: np.ndarray) -> np.ndarray:
    """The features ``x`` as grey levels 0 (black) .. 255 (white), uint8.

    Features within [0, 1], the range every built-in image set is scaled to, map by that fixed
    range, ``round(255 * v)``, so that a faint item looks faint beside a dark one; anything else
    (a user's own pixel values) by the item's own min-max, a constant item to black. Levels are
    rounded half up.

    >>> grey_levels(np.array([0.0, 0.5, 1.0])).tolist()
    [0, 128, 255]
    >>> grey_levels(np.array([0.0, 0.25])).tolist()  # [0, 1]: not stretched to white
    [0, 64]
    >>> grey_levels(np.array([-2.0, 0.0, 2.0])).tolist()  # its own min-max
    [0, 128, 255]
    """
    v = np.asarray(x, dtype=np.float64)
    low, high = (0.0, 1.0) if v.min() >= 0.0 and v.max() <= 1.0 else (v.min(), v.max())
    span = high - low
    scaled = (v - low) / span if span > 0 else np.zeros_like(v)
    # rounded half up, the same on every platform (np.round rounds half to even)
    return np.floor(np.clip(scaled, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def render_thumbnail(x: np.ndarray, image_shape: tuple[int, int], size: int) -> bytes:
    """A PNG of the features ``x`` drawn as a greyscale ``image_shape`` (height, width) image,
    row-major, enlarged by nearest-neighbour sampling to ``size`` pixels on its longer side (the
    other in proportion, at least 1): thumbnail pixel (i, j) of an (H, W) thumbnail shows feature
    pixel (floor((i + 0.5) * height / H), floor((j + 0.5) * width / W)).

    >>> png = render_thumbnail(np.array([0.0, 1.0, 1.0, 0.0]), (2, 2), 16)
    >>> image = Image.open(io.BytesIO(png))
    >>> image.format, image.mode, image.size
    ('PNG', 'L', (16, 16))
    >>> image.getpixel((0, 0)), image.getpixel((8, 0)), image.getpixel((15, 15))
    (0, 255, 0)
    """
    height, width = image_shape
    pixels = grey_levels(x).reshape(height, width)
    scale = size / max(height, width)
    out_h, out_w = max(1, round(height * scale)), max(1, round(width * scale))
    # Sampled here rather than by Image.resize, whose float arithmetic moves some block edges
    # by a pixel: the thumbnail is then exactly the mapping documented above.
    rows = ((np.arange(out_h) + 0.5) * height / out_h).astype(np.int64)
    cols = ((np.arange(out_w) + 0.5) * width / out_w).astype(np.int64)
    image = Image.fromarray(np.ascontiguousarray(pixels[np.ix_(rows, cols)]))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


class ThumbnailCache:
    """PNG bytes by key, least recently used first out, bounded in entries and in bytes.

    Thread-safe: the console renders thumbnails in the server's worker threads. ``hits`` and
    ``misses`` count :meth:`get` calls.

    >>> cache = ThumbnailCache(max_entries=2)
    >>> cache.put("a", b"1"); cache.put("b", b"22"); cache.get("a")
    b'1'
    >>> cache.put("c", b"333")  # "b" is the least recently used
    >>> cache.get("b") is None, len(cache), cache.bytes, (cache.hits, cache.misses)
    (True, 2, 4, (1, 1))
    """

    def __init__(self, max_entries: int = 4096, max_bytes: int = 32 * 2**20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> bytes | None:
        """The bytes stored under ``key`` (now the most recently used), or None."""
        with self._lock:
            data = self._entries.get(key)
            if data is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return data

    def put(self, key: Hashable, data: bytes) -> None:
        """Store ``data`` under ``key``, dropping the least recently used entries beyond the
        bounds (an entry larger than ``max_bytes`` is not kept at all)."""
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= len(old)
            if len(data) > self.max_bytes:
                return
            self._entries[key] = data
            self.bytes += len(data)
            while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self.bytes -= len(dropped)
