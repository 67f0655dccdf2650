"""Image decoding and the geometric / photometric transforms of receipt detection.

All geometry is a 3x3 float64 matrix acting on ``(x, y, 1)`` in *continuous* pixel coordinates:
pixel ``(i, j)`` covers ``[i, i + 1] x [j, j + 1]`` (the convention of ``cv2.resize``, whose
scaling is then exactly ``x' = s * x``). Matrices compose by product, so a prediction on the
canvas maps back to the annotation frame with one inverse, and polygons follow the pixels exactly.

Frames: *raw* (the stored pixels, where annotations live) -> *oriented* (after EXIF orientation,
what :func:`load_image` returns, possibly decoded at reduced JPEG scale) -> *canvas* (the square
model input that :class:`ReceiptTransform` produces).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import torch
from PIL import Image

from ocr.errors import ConfigError, InputError, MissingPathError

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageLoadError",
    "ReceiptTransform",
    "apply_matrix",
    "exif_orientation_matrix",
    "load_image",
    "normalization_constants",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_ORIENTATION_TAG = 0x0112

# Same table as PIL.ImageOps.exif_transpose, so the pixels and exif_orientation_matrix agree.
_EXIF_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}

# Below this overall scale a single bilinear warp would skip source pixels (aliasing thin text
# strokes): shrink with INTER_AREA first, then warp at ~unit scale.
_AREA_PRESHRINK_BELOW = 0.75


def normalization_constants(
    mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """The float32 ``(offset, inv_scale)`` of normalisation on the 0..255 scale, per RGB channel:
    ``normalised = (v - offset) * inv_scale`` in float32 arithmetic, with ``offset = f32(mean) *
    255`` and ``inv_scale = 1 / (f32(std) * 255)`` rounded to float32. Returned as Python floats
    (exactly those float32 values), so a batch can carry them and the device repeats the
    worker's arithmetic bit for bit (:mod:`ocr.data.compact`)."""
    mean_a = np.asarray(mean, dtype=np.float32)
    std_a = np.asarray(std, dtype=np.float32)
    if mean_a.shape != (3,) or std_a.shape != (3,) or not (std_a > 0).all():
        raise ConfigError(f"mean and std must be 3 values with std > 0, got {mean!r}, {std!r}")
    offset = (mean_a * 255.0).astype(np.float32)
    inv_scale = (1.0 / (std_a * 255.0)).astype(np.float32)
    o0, o1, o2 = (float(v) for v in offset)
    i0, i1, i2 = (float(v) for v in inv_scale)
    return (o0, o1, o2), (i0, i1, i2)


class ImageLoadError(InputError, OSError):
    """An image file exists but cannot be decoded (corrupt, truncated, unknown format)."""


def exif_orientation_matrix(orientation: int, width: int, height: int) -> np.ndarray:
    """Matrix (3, 3) mapping raw stored pixel coordinates to the EXIF-oriented (displayed) frame.

    Args:
        orientation: EXIF Orientation tag value, 1..8 (1 = as stored).
        width: stored image width in pixels.
        height: stored image height in pixels.

    Consistent with ``PIL.ImageOps.exif_transpose``: a point on some image content in the stored
    image lands on the same content in the transposed one.
    """
    w, h = float(width), float(height)
    rows = {
        1: ((1, 0, 0), (0, 1, 0)),
        2: ((-1, 0, w), (0, 1, 0)),  # mirror left-right
        3: ((-1, 0, w), (0, -1, h)),  # rotate 180
        4: ((1, 0, 0), (0, -1, h)),  # mirror top-bottom
        5: ((0, 1, 0), (1, 0, 0)),  # transpose (mirror on the main diagonal)
        6: ((0, -1, h), (1, 0, 0)),  # rotate 90 clockwise
        7: ((0, -1, h), (-1, 0, w)),  # transverse (mirror on the anti-diagonal)
        8: ((0, 1, 0), (-1, 0, w)),  # rotate 90 counter-clockwise
    }
    if orientation not in rows:
        raise ValueError(f"EXIF orientation must be 1..8, got {orientation!r}")
    m = np.eye(3)
    m[:2] = rows[orientation]
    return m


def apply_matrix(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Apply an affine 3x3 ``matrix`` to (N, 2) points; returns float64 (N, 2)."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return pts @ matrix[:2, :2].T + matrix[:2, 2]


def _scale(sx: float, sy: float) -> np.ndarray:
    return np.diag([sx, sy, 1.0])


def _translate(tx: float, ty: float) -> np.ndarray:
    m = np.eye(3)
    m[:2, 2] = (tx, ty)
    return m


def load_image(
    path: str | os.PathLike[str], *, min_longest_side: int | None = None
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Decode an image to RGB uint8 (H, W, 3) with its EXIF orientation applied.

    Args:
        path: the image file.
        min_longest_side: if given, a JPEG may be decoded at 1/2, 1/4 or 1/8 scale (libjpeg's DCT
            scaling: several times faster than a full decode plus resize) as long as its longest
            side stays at least this many pixels. ``None`` (default) decodes at full size.

    Returns:
        ``(image, matrix, (raw_width, raw_height))`` where ``matrix`` (3, 3) maps raw stored-pixel
        coordinates (the annotation frame) to ``image``'s pixel frame, and the size is the stored
        image's.

    Raises:
        FileNotFoundError: no file at ``path``.
        ImageLoadError: the file cannot be decoded (corrupt, truncated, not an image).
    """
    path = Path(path)
    try:
        with Image.open(path) as img:
            raw_w, raw_h = img.size
            reduce = 1.0
            if min_longest_side is not None and img.format in ("JPEG", "MPO"):  # MPO: phone JPEGs
                factor = _jpeg_reduction(raw_w, raw_h, min_longest_side)
                if factor > 1:
                    drafted = img.draft("RGB", (raw_w // factor, raw_h // factor))
                    if drafted is not None:
                        # draft's box is the raw image's extent in the reduced frame.
                        reduce = drafted[1][2] / raw_w
            try:
                orientation = int(img.getexif().get(_ORIENTATION_TAG, 1))
            except (TypeError, ValueError):
                orientation = 1
            if orientation not in _EXIF_TRANSPOSE:
                orientation = 1  # PIL ignores unknown values too
            rgb = img.convert("RGB")  # decodes; truncated data raises here
            dec_w, dec_h = rgb.size  # = ceil(raw / reduction) after a draft
            if orientation != 1:
                rgb = rgb.transpose(_EXIF_TRANSPOSE[orientation])
            array = np.asarray(rgb, dtype=np.uint8)
    except FileNotFoundError:
        raise MissingPathError(f"image not found: {path}") from None
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as exc:
        # PIL signals broken files with several exception types (SyntaxError in some plugins).
        raise ImageLoadError(f"cannot decode image {path}: {exc}") from exc
    # Orientation flips about the decoded image's pixel extent, which is what PIL transposes.
    matrix = exif_orientation_matrix(orientation, dec_w, dec_h) @ _scale(reduce, reduce)
    return array, matrix, (raw_w, raw_h)


def _jpeg_reduction(width: int, height: int, min_longest_side: int) -> int:
    """Largest libjpeg reduction (8, 4, 2, 1) keeping the longest side >= ``min_longest_side``."""
    for factor in (8, 4, 2):
        if (
            min(width, height) // factor >= 1
            and -(-max(width, height) // factor) >= min_longest_side
        ):
            return factor
    return 1


class ReceiptTransform:
    """Letterbox an oriented image onto a square canvas, with optional training augmentation.

    Evaluation: resize so the longest side is ``canvas_size`` (aspect kept; ``INTER_AREA`` when
    shrinking, ``INTER_LINEAR`` when enlarging), then pad right/bottom with black (pixel value 0
    before normalisation) to ``canvas_size x canvas_size``. Anchored top-left, so the inverse is a
    pure scale. Training: the same letterbox followed by a random affine about the content centre
    (rotation, scale, translation), applied in one ``cv2.warpAffine`` (preceded by an
    ``INTER_AREA`` shrink when the overall scale is below 0.75, to avoid aliasing), and a
    brightness/contrast jitter. Polygons get the same matrix; after augmentation they may extend
    past the canvas (target generation clips them).

    Args:
        canvas_size: side of the square output in pixels; a positive multiple of 32 (the model's
            stride). Default 640.
        train: apply the random augmentation. Default False.
        rotate_deg: maximum rotation in degrees, drawn uniformly in ``±rotate_deg``. Default 5.0.
        scale_range: (min, max) random zoom factor relative to the letterbox (unitless).
            Default (0.8, 1.1).
        translate_frac: maximum shift per axis as a fraction of ``canvas_size``. Default 0.05.
        color_jitter: maximum brightness shift (fraction of 255) and contrast change (fraction,
            about mid-grey), each drawn uniformly in ``±color_jitter``. Default 0.2.
        mean: per-channel RGB mean on the [0, 1] scale. Default ImageNet's.
        std: per-channel RGB standard deviation on the [0, 1] scale. Default ImageNet's.
        compact: return the canvas as it is, uint8 ``(S, S, 3)`` (RGB, channels last), and leave
            the normalisation to the device (:func:`ocr.data.compact.expand_batch`, the same
            float32 arithmetic): a quarter of the bytes to send, no float pass in the worker.
            Default False (a normalised float32 ``(3, S, S)`` tensor).

    Call: ``transform(image, polygons, rng)`` with an RGB uint8 (H, W, 3) image, polygons (N, 2)
    in the image's pixel frame and a ``np.random.Generator`` (unused in evaluation). Returns the
    image tensor (normalised float32 (3, S, S), or uint8 (S, S, 3) with ``compact``), the
    polygons in canvas pixels (float32 (N, 2)) and the 3x3 float64 matrix mapping image pixels
    to canvas pixels.
    """

    def __init__(
        self,
        canvas_size: int = 640,
        train: bool = False,
        rotate_deg: float = 5.0,
        scale_range: Sequence[float] = (0.8, 1.1),
        translate_frac: float = 0.05,
        color_jitter: float = 0.2,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        compact: bool = False,
    ) -> None:
        if (
            isinstance(canvas_size, bool)
            or not isinstance(canvas_size, int | np.integer)
            or canvas_size <= 0
            or canvas_size % 32
        ):
            raise ConfigError(
                f"canvas_size must be a positive multiple of 32 (the model's stride), "
                f"got {canvas_size!r}"
            )
        scale_range = tuple(float(v) for v in scale_range)
        if len(scale_range) != 2 or not 0 < scale_range[0] <= scale_range[1]:
            raise ConfigError(
                f"scale_range must be (min, max) with 0 < min <= max, got {scale_range}"
            )
        if not 0 <= rotate_deg <= 180:
            raise ConfigError(f"rotate_deg must be in [0, 180], got {rotate_deg!r}")
        if not 0 <= translate_frac < 1:
            raise ConfigError(f"translate_frac must be in [0, 1), got {translate_frac!r}")
        if not 0 <= color_jitter < 1:
            raise ConfigError(f"color_jitter must be in [0, 1), got {color_jitter!r}")
        offset, inv_scale = normalization_constants(mean, std)
        self.canvas_size = int(canvas_size)
        self.train = bool(train)
        self.rotate_deg = float(rotate_deg)
        self.scale_range = scale_range
        self.translate_frac = float(translate_frac)
        self.color_jitter = float(color_jitter)
        self.mean = tuple(float(v) for v in np.asarray(mean, dtype=np.float32))
        self.std = tuple(float(v) for v in np.asarray(std, dtype=np.float32))
        self.compact = bool(compact)
        # Normalisation on the 0..255 scale: (v - 255 * mean) * (1 / (255 * std)).
        self._offset = torch.tensor(offset, dtype=torch.float32).view(3, 1, 1)
        self._inv_scale = torch.tensor(inv_scale, dtype=torch.float32).view(3, 1, 1)

    @property
    def min_source_side(self) -> int:
        """Longest image side (px) below which this transform would upsample: the
        ``min_longest_side`` worth passing to :func:`load_image`."""
        zoom = max(1.0, self.scale_range[1]) if self.train else 1.0
        return math.ceil(self.canvas_size * zoom)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(canvas_size={self.canvas_size}, train={self.train}, "
            f"rotate_deg={self.rotate_deg}, scale_range={self.scale_range}, "
            f"translate_frac={self.translate_frac}, color_jitter={self.color_jitter}, "
            f"compact={self.compact})"
        )

    def __call__(
        self, image: np.ndarray, polygons: Sequence[np.ndarray], rng: np.random.Generator
    ) -> tuple[torch.Tensor, list[np.ndarray], np.ndarray]:
        if not (
            isinstance(image, np.ndarray)
            and image.dtype == np.uint8
            and image.ndim == 3
            and image.shape[2] == 3
            and image.shape[0] > 0
            and image.shape[1] > 0
        ):
            desc = f"{image.dtype} {image.shape}" if isinstance(image, np.ndarray) else type(image)
            raise ValueError(f"image must be an RGB uint8 array (H, W, 3), got {desc}")
        if self.train:
            canvas, matrix = self._augment(image, rng)
        else:
            canvas, matrix = self._letterbox(image)
        out = [apply_matrix(matrix, p).astype(np.float32) for p in polygons]
        return self._to_tensor(canvas), out, matrix

    # -- geometry ------------------------------------------------------------------------------
    def _letterbox(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, w = image.shape[:2]
        size = self.canvas_size
        s = size / max(h, w)
        nw, nh = min(size, max(1, round(w * s))), min(size, max(1, round(h * s)))
        if (nw, nh) != (w, h):
            interp = cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR
            image = cv2.resize(image, (nw, nh), interpolation=interp)
        canvas = np.zeros((size, size, 3), dtype=np.uint8)
        canvas[:nh, :nw] = image
        # The actual per-axis factors (after rounding) are what cv2.resize applied.
        return canvas, _scale(nw / w, nh / h)

    def _augment(
        self, image: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        h, w = image.shape[:2]
        size = self.canvas_size
        s0 = size / max(h, w)
        angle = math.radians(rng.uniform(-self.rotate_deg, self.rotate_deg))
        zoom = rng.uniform(*self.scale_range)
        tx, ty = rng.uniform(-self.translate_frac, self.translate_frac, size=2) * size
        brightness, contrast = rng.uniform(-self.color_jitter, self.color_jitter, size=2)

        cx, cy = w * s0 / 2, h * s0 / 2  # content centre after the letterbox
        c, s = math.cos(angle) * zoom, math.sin(angle) * zoom
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        matrix = _translate(cx + tx, cy + ty) @ rot @ _translate(-cx, -cy) @ _scale(s0, s0)

        # Jitter the uint8 source through a lookup table (exact clipping, cheap) before warping,
        # so the black border stays black.
        lut = np.clip(
            (np.arange(256) - 127.5) * (1.0 + contrast) + 127.5 + brightness * 255.0, 0, 255
        )
        src = image
        src_to_image = np.eye(3)
        total = s0 * zoom
        if total < _AREA_PRESHRINK_BELOW:
            nw, nh = max(1, round(w * total)), max(1, round(h * total))
            src = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
            src_to_image = _scale(w / nw, h / nh)
        src = cv2.LUT(src, np.round(lut).astype(np.uint8))
        warp = matrix @ src_to_image
        # warpAffine works on pixel indices (centres at integers): shift by half a pixel.
        warp_idx = _translate(-0.5, -0.5) @ warp @ _translate(0.5, 0.5)
        canvas = cv2.warpAffine(
            src,
            warp_idx[:2],
            (size, size),
            flags=cv2.INTER_LINEAR,
            borderMode=cv2.BORDER_CONSTANT,
            borderValue=(0, 0, 0),
        )
        return canvas, matrix

    def _to_tensor(self, canvas: np.ndarray) -> torch.Tensor:
        if self.compact:
            return torch.from_numpy(canvas)  # uint8 (S, S, 3): normalised on the device
        t = (
            torch.from_numpy(canvas)
            .permute(2, 0, 1)
            .to(torch.float32, memory_format=torch.contiguous_format)
        )
        return t.sub_(self._offset).mul_(self._inv_scale)
