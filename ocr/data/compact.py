"""Compact batches: what DataLoader workers send, and its expansion on the device.

A float32 batch at 640 px, batch 16, is ~184 MB in 6 tensors (images 79 MB, four target maps
105 MB, three of which hold only 0 and 1); the main process receives every byte and, with CUDA,
pins it in one thread. A compact batch carries the same information in ~52 MB and 2 tensors:

* ``images``: uint8 ``(B, H, W, 3)``, the canvases as the transform drew them (RGB, channels
  last), with ``normalization``: the float32 ``(offset, inv_scale)`` per channel as Python floats
  (:func:`ocr.data.transforms.normalization_constants`; plain floats stay on the host and are
  never a tensor to send).
* ``targets`` (training / validation only): uint8 ``(B, L)``, per sample ``flag_bytes(H, W)``
  bytes of flags, bit 0 ``prob_map``, bit 1 ``prob_mask``, bit 2 ``thresh_mask``, padded to a
  multiple of 4, then the float32 ``thresh_map`` (``H * W * 4`` bytes, little-endian), so the
  threshold values are today's float32 values, bit for bit.
* ``inverse_matrices``: a float64 numpy array ``(B, 3, 3)``: read on the host (predictions map
  back to the raw image frame there), so it is never moved to the device and back.

:func:`expand_batch` turns such a batch, after its transfer, into the float32 layout the model and
the loss read (``images`` ``(B, 3, H, W)`` normalised, ``prob_maps``, ``prob_masks``,
``thresh_maps``, ``thresh_masks`` ``(B, H, W)``) with device ops only (no host read, no sync): the
same float32 arithmetic as the worker-side normalisation (convert, subtract, multiply), so
the result is bit-equal to the float32 pipeline's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ocr.data.targets import DBTargets

__all__ = [
    "COMPACT_KEYS",
    "expand_batch",
    "flag_bytes",
    "is_compact",
    "pack_flags",
    "sample_bytes",
    "sample_views",
]

#: Keys of a compact batch that the expansion replaces.
COMPACT_KEYS = ("targets", "normalization")

_PROB_MAP, _PROB_MASK, _THRESH_MASK = 1, 2, 4

# (offset, inv_scale, device) -> the (1, 3, 1, 1) constants on that device: made
# once per device, so no step copies host values to the device (a pageable copy would sync).
_CONSTANTS: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def flag_bytes(height: int, width: int) -> int:
    """Bytes of one sample's flag plane: ``H * W`` rounded up to a multiple of 4, so the float32
    threshold map after it starts 4-byte aligned."""
    return -(-height * width // 4) * 4


def sample_bytes(height: int, width: int) -> int:
    """Bytes of one sample's row of ``targets``: the flag plane, then the float32 threshold map."""
    return flag_bytes(height, width) + 4 * height * width


def sample_views(
    row: npt.NDArray[np.uint8], height: int, width: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32]]:
    """The flag plane (uint8 ``(H, W)``) and threshold map (float32 ``(H, W)``) inside one row of
    ``targets`` (views: writing them fills the row)."""
    flags_end = flag_bytes(height, width)
    flags = row[: height * width].reshape(height, width)
    thresh = row[flags_end:].view("<f4").reshape(height, width)
    return flags, thresh


def pack_flags(maps: DBTargets, out: npt.NDArray[np.uint8]) -> None:
    """Write the three binary maps of ``maps`` (uint8 or float32 0/1) as bits into ``out``."""
    np.copyto(out, maps.prob_map, casting="unsafe")
    out |= maps.prob_mask.astype(np.uint8, copy=False) << 1
    out |= maps.thresh_mask.astype(np.uint8, copy=False) << 2


def is_compact(batch: Any) -> bool:
    """Whether ``batch`` is a compact batch (uint8 images), which :func:`expand_batch` expands."""
    if not isinstance(batch, Mapping):
        return False
    images = batch.get("images")
    return isinstance(images, torch.Tensor) and images.dtype == torch.uint8


def _constants(normalization: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    offset, inv_scale = (tuple(float(v) for v in values) for values in normalization)
    key = (offset, inv_scale, device)
    found = _CONSTANTS.get(key)
    if found is None:
        found = (
            torch.tensor(offset, dtype=torch.float32).view(1, 3, 1, 1).to(device),
            torch.tensor(inv_scale, dtype=torch.float32).view(1, 3, 1, 1).to(device),
        )
        _CONSTANTS[key] = found
    return found


def expand_batch(batch: Any, *, channels_last: bool = False) -> Any:
    """The float32 batch of a compact one (module docstring); any other batch is returned as is.

    Runs where the batch is (on the device after the transfer: the LightningModule's
    ``on_after_batch_transfer``): device ops only. ``channels_last``: the images come out in
    the channels-last memory format (what such a network wants; the uint8 images already are),
    else contiguous NCHW. Values are identical either way.
    """
    if not is_compact(batch):
        return batch
    out = {k: v for k, v in batch.items() if k not in COMPACT_KEYS}
    images: torch.Tensor = batch["images"]
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"compact images must be uint8 (B, H, W, 3), got {tuple(images.shape)}")
    if "normalization" not in batch:
        raise ValueError("a compact batch (uint8 images) must carry its 'normalization'")
    offset, inv_scale = _constants(batch["normalization"], images.device)
    nchw = images.permute(0, 3, 1, 2)  # a view: channels-last strides
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    # The worker's arithmetic, in the same order and dtype: float32(v), - offset, * inv_scale.
    out["images"] = nchw.to(torch.float32, memory_format=fmt).sub_(offset).mul_(inv_scale)
    targets = batch.get("targets")
    if targets is not None:
        count, height, width = images.shape[0], images.shape[1], images.shape[2]
        if targets.dtype != torch.uint8 or tuple(targets.shape) != (
            count,
            sample_bytes(height, width),
        ):
            raise ValueError(
                f"compact targets must be uint8 ({count}, {sample_bytes(height, width)}) for "
                f"{height}x{width} images, got {targets.dtype} {tuple(targets.shape)}"
            )
        pixels = height * width
        flags = targets[:, :pixels].view(count, height, width)
        out["prob_maps"] = (flags & _PROB_MAP).to(torch.float32)
        out["prob_masks"] = (flags & _PROB_MASK).bool().to(torch.float32)
        out["thresh_masks"] = (flags & _THRESH_MASK).bool().to(torch.float32)
        thresh = targets[:, flag_bytes(height, width) :].view(torch.float32)
        out["thresh_maps"] = thresh.view(count, height, width)
    return out
