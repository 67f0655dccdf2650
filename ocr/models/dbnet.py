"""DBNet (Liao et al., "Real-time Scene Text Detection with Differentiable Binarization"):
a ResNet backbone, an FPN neck that fuses four scales at stride 4, and a head that predicts a
probability map, a threshold map and, for training, their differentiable binarization.

Plain PyTorch (no torchvision): the backbone uses torchvision's parameter names so a locally saved
torchvision ResNet ``state_dict`` loads directly through ``weights=``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ocr.errors import ConfigError, MissingPathError

# depth -> (block, blocks per stage), as in torchvision / He et al.
_RESNET_SPECS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}

# The network downsamples by 32 in total; the head upsamples stride-4 features by exactly 4.
INPUT_MULTIPLE = 32

# How many offending keys an error message lists before summarising the rest.
_MAX_KEYS_SHOWN = 5


def _init_weights(module: nn.Module) -> None:
    """Kaiming-normal convolutions (fan_out, ReLU), BN weight 1 / bias 0, zero conv biases."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an identity (or 1x1-projected) shortcut; ``expansion`` 1.

    Args:
        in_channels: input channels.
        width: channels of both convolutions (= output channels).
        stride: stride of the first convolution and of the shortcut projection. Default 1.
    """

    expansion = 1

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_channels, out_channels, stride)

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, torchvision "v1.5"), 1x1 expand by 4, with a shortcut.

    Args:
        in_channels: input channels.
        width: channels of the inner convolutions; the block outputs ``4 * width``.
        stride: stride of the 3x3 convolution and of the shortcut projection. Default 1.
    """

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_channels, out_channels, stride)

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Sequential | None:
    if stride == 1 and in_channels == out_channels:
        return None
    # Named ``downsample.0`` / ``downsample.1`` like torchvision.
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
        nn.BatchNorm2d(out_channels),
    )


_BLOCKS: dict[str, type[BasicBlock] | type[Bottleneck]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
}


class ResNetBackbone(nn.Module):
    """ResNet feature extractor returning the four stage outputs (strides 4, 8, 16, 32).

    Stem: 7x7/2 convolution + BN + ReLU + 3x3/2 max-pool, then ``layer1``..``layer4``. Parameter
    names follow torchvision, so ``torchvision.models.resnet18().state_dict()`` saved to a file
    loads through ``weights``.

    Args:
        depth: standard ResNet depth, one of 18, 34 (basic blocks), 50, 101, 152 (bottlenecks).
            Default 18. Ignored when ``layers`` is given; may then be ``None``.
        layers: blocks per stage (4 positive ints), overriding ``depth`` for custom/small
            models, e.g. ``[1, 1, 1, 1]``. Default ``None`` (use ``depth``).
        widths: per-stage block width in channels (4 positive ints); a stage outputs
            ``width * expansion`` channels (expansion 1 for basic, 4 for bottleneck).
            Default ``(64, 128, 256, 512)``.
        block: ``"basic"`` or ``"bottleneck"``, the block of custom ``layers``. Default
            ``"basic"``. A standard ``depth`` (without ``layers``) fixes its own block and
            ignores this one, so overriding only ``depth`` (e.g. 18 -> 50 from the command
            line) gives the standard network.
        stem_channels: output channels of the stem convolution. Default ``None`` = ``widths[0]``
            (64 for the standard widths, as in torchvision).
        weights: optional path of a LOCAL weights file (never downloaded): a ``state_dict``, or
            a dict holding one under ``"state_dict"`` or ``"model"``. Loaded with
            ``torch.load(map_location="cpu", weights_only=True)``; ``fc.*`` keys (the classifier)
            are ignored; any other missing, unexpected or shape-mismatched key is an error.
            Default ``None`` (random Kaiming initialisation).

    Attributes:
        out_channels: channels of the four returned feature maps.
    """

    def __init__(
        self,
        depth: int | None = 18,
        layers: Sequence[int] | None = None,
        widths: Sequence[int] = (64, 128, 256, 512),
        block: str = "basic",
        stem_channels: int | None = None,
        weights: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__()
        block_name, stage_layers = _resolve_architecture(depth, layers, block)
        stage_widths = _four_positive_ints("widths", widths)
        stem = stage_widths[0] if stem_channels is None else int(stem_channels)
        if stem <= 0:
            raise ConfigError(
                f"ResNetBackbone: stem_channels must be positive, got {stem_channels}"
            )
        block_cls = _BLOCKS[block_name]

        self.conv1 = nn.Conv2d(3, stem, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

        in_channels = stem
        stages: list[nn.Sequential] = []
        for i, (n_blocks, width) in enumerate(zip(stage_layers, stage_widths, strict=True)):
            stride = 1 if i == 0 else 2
            blocks: list[nn.Module] = []
            for j in range(n_blocks):
                blocks.append(block_cls(in_channels, width, stride if j == 0 else 1))
                in_channels = width * block_cls.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.out_channels: list[int] = [w * block_cls.expansion for w in stage_widths]

        _init_weights(self)
        if weights is not None:
            self.load_weights(weights)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        c2 = self.layer1(x)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        return [c2, c3, c4, c5]

    def load_weights(self, path: str | os.PathLike[str]) -> None:
        """Load a local weights file (see the ``weights`` argument); errors name the file."""
        file = Path(path)
        if not file.is_file():
            raise MissingPathError(f"ResNetBackbone weights file not found: {file}")
        try:
            loaded = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise ConfigError(f"ResNetBackbone: cannot load weights file {file}: {exc}") from exc
        state = _extract_state_dict(loaded, file)
        state = {k: v for k, v in state.items() if not k.startswith("fc.")}

        own = self.state_dict()
        unexpected = [k for k in state if k not in own]
        # Old torchvision files predate BatchNorm's ``num_batches_tracked``; BN fills it in.
        missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
        mismatched = [
            f"{k} (file {tuple(v.shape)} vs model {tuple(own[k].shape)})"
            for k, v in state.items()
            if k in own and (not isinstance(v, Tensor) or v.shape != own[k].shape)
        ]
        problems = [
            f"{label}: {_first_keys(keys)}"
            for label, keys in (
                ("missing keys", missing),
                ("unexpected keys", unexpected),
                ("shape mismatches", mismatched),
            )
            if keys
        ]
        if problems:
            raise ConfigError(
                f"ResNetBackbone weights file {file} does not match this architecture "
                f"(out_channels={self.out_channels}): " + "; ".join(problems)
            )
        self.load_state_dict(state, strict=False)


def _resolve_architecture(
    depth: int | None, layers: Sequence[int] | None, block: str
) -> tuple[str, tuple[int, ...]]:
    if block not in _BLOCKS:
        raise ConfigError(f"ResNetBackbone: block must be one of {sorted(_BLOCKS)}, got {block!r}")
    if layers is not None:
        return block, _four_positive_ints("layers", layers)
    if depth is None:
        raise ConfigError("ResNetBackbone: give either depth or layers (both are None)")
    if depth not in _RESNET_SPECS:
        raise ConfigError(
            f"ResNetBackbone: depth must be one of {sorted(_RESNET_SPECS)} "
            f"(or give layers=...), got {depth!r}"
        )
    return _RESNET_SPECS[depth]


def _four_positive_ints(name: str, values: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(v) for v in values)
    if len(out) != 4 or any(v <= 0 for v in out):
        raise ConfigError(f"ResNetBackbone: {name} must be 4 positive ints, got {list(values)}")
    return out


def _extract_state_dict(loaded: Any, file: Path) -> dict[str, Any]:
    if isinstance(loaded, Mapping):
        for key in ("state_dict", "model"):
            if isinstance(loaded.get(key), Mapping):
                return dict(loaded[key])
        if all(isinstance(v, Tensor) for v in loaded.values()):
            return dict(loaded)
    raise ConfigError(
        f"ResNetBackbone weights file {file} holds neither a state_dict nor a dict with a "
        f"'state_dict' or 'model' entry (got {type(loaded).__name__})"
    )


def _first_keys(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_KEYS_SHOWN])
    rest = len(keys) - _MAX_KEYS_SHOWN
    return shown + (f" ... and {rest} more" if rest > 0 else "")


class FPNNeck(nn.Module):
    """Feature pyramid fusing four scales into one stride-4 map, as in DBNet.

    Lateral 1x1 convolutions project each stage to ``inner_channels``; a top-down pass adds each
    coarser map (nearest upsampling) to the next finer one; a 3x3 convolution per level reduces
    to ``inner_channels // 4``; all levels are upsampled (nearest) to stride 4 and concatenated.

    Args:
        in_channels: channels of the four backbone maps, finest first (``backbone.out_channels``).
        inner_channels: channels of the lateral maps and of the fused output; a positive multiple
            of 4. Default 256.
    """

    def __init__(self, in_channels: Sequence[int], inner_channels: int = 256) -> None:
        super().__init__()
        channels = [int(c) for c in in_channels]
        if len(channels) != 4 or any(c <= 0 for c in channels):
            raise ConfigError(f"FPNNeck: in_channels must be 4 positive ints, got {in_channels}")
        if inner_channels <= 0 or inner_channels % 4:
            raise ConfigError(
                f"FPNNeck: inner_channels must be a positive multiple of 4, got {inner_channels}"
            )
        self.lateral = nn.ModuleList(nn.Conv2d(c, inner_channels, 1, bias=False) for c in channels)
        self.smooth = nn.ModuleList(
            nn.Conv2d(inner_channels, inner_channels // 4, 3, padding=1, bias=False)
            for _ in channels
        )
        self.out_channels = inner_channels
        _init_weights(self)

    def forward(self, features: Sequence[Tensor]) -> Tensor:
        laterals = [conv(f) for conv, f in zip(self.lateral, features, strict=True)]
        # Top-down: coarsest first; ``size=`` rather than a scale factor so odd sizes still align.
        for i in range(len(laterals) - 1, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(
                laterals[i], size=laterals[i - 1].shape[-2:], mode="nearest"
            )
        size = laterals[0].shape[-2:]
        outs = [conv(lat) for conv, lat in zip(self.smooth, laterals, strict=True)]
        outs = [outs[0]] + [F.interpolate(o, size=size, mode="nearest") for o in outs[1:]]
        # Coarsest first, as in the DB reference implementation.
        return torch.cat(outs[::-1], dim=1)


def _head_branch(channels: int) -> nn.Sequential:
    quarter = channels // 4
    return nn.Sequential(
        nn.Conv2d(channels, quarter, 3, padding=1, bias=False),
        nn.BatchNorm2d(quarter),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(quarter, quarter, 2, stride=2),
        nn.BatchNorm2d(quarter),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(quarter, 1, 2, stride=2),
    )


class DBHead(nn.Module):
    """Probability and threshold branches at stride 4, each upsampled x4 to the input resolution.

    Every output is float32 (also under autocast): the maps are small and the loss and
    postprocessing want float32 anyway.

    Args:
        in_channels: channels of the fused neck map; a positive multiple of 4.
        k: amplification factor of the differentiable binarization
            ``B = sigmoid(k * (P - T))`` (dimensionless). Default 50.0, as in the paper.
    """

    def __init__(self, in_channels: int, k: float = 50.0) -> None:
        super().__init__()
        if in_channels <= 0 or in_channels % 4:
            raise ConfigError(
                f"DBHead: in_channels must be a positive multiple of 4, got {in_channels}"
            )
        self.k = float(k)
        self.prob = _head_branch(in_channels)
        self.thresh = _head_branch(in_channels)
        _init_weights(self)

    def binarize(self, prob_map: Tensor, thresh_map: Tensor) -> Tensor:
        """Differentiable binarization, computed in float32 even under autocast (a ``k=50``
        step in half precision saturates and loses the gradient)."""
        with torch.autocast(device_type=prob_map.device.type, enabled=False):
            return torch.sigmoid(self.k * (prob_map.float() - thresh_map.float()))

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        prob_logits = self.prob(x).float()
        thresh_map = torch.sigmoid(self.thresh(x).float())
        prob_map = torch.sigmoid(prob_logits)
        out = {"prob_logits": prob_logits, "prob_map": prob_map, "thresh_map": thresh_map}
        if self.training:
            out["binary_map"] = self.binarize(prob_map, thresh_map)
        return out


class DBNet(nn.Module):
    """ResNet + FPN + DB head text detector.

    ``forward(images)`` takes a float batch ``(B, 3, H, W)`` with H and W multiples of 32 and
    returns a dict of ``(B, 1, H, W)`` float32 maps: ``"prob_logits"`` (for an autocast-safe
    BCE-with-logits loss), ``"prob_map"`` = sigmoid(prob_logits), ``"thresh_map"`` (in [0, 1])
    and, in training mode, ``"binary_map"`` (see ``binarize``).

    Args:
        backbone: a ``ResNetBackbone``, or a mapping of its constructor arguments (so a Hydra
            YAML can pass a plain dict, e.g. ``{depth: 18}``).
        neck_channels: ``FPNNeck`` inner channels (= head input channels); a positive multiple
            of 4. Default 256.
        k: binarization amplification factor of ``DBHead``. Default 50.0.
    """

    def __init__(
        self,
        backbone: ResNetBackbone | Mapping[str, Any],
        neck_channels: int = 256,
        k: float = 50.0,
    ) -> None:
        super().__init__()
        if isinstance(backbone, ResNetBackbone):
            self.backbone = backbone
        elif isinstance(backbone, Mapping):
            self.backbone = ResNetBackbone(**{str(key): v for key, v in backbone.items()})
        else:
            raise TypeError(
                "DBNet: backbone must be a ResNetBackbone or a mapping of its arguments, "
                f"got {type(backbone).__name__}"
            )
        self.neck = FPNNeck(self.backbone.out_channels, neck_channels)
        self.head = DBHead(neck_channels, k)

    def binarize(self, prob_map: Tensor, thresh_map: Tensor) -> Tensor:
        """``sigmoid(k * (prob_map - thresh_map))`` in float32, e.g. for a validation loss
        computed in eval mode (where ``forward`` omits ``"binary_map"``)."""
        return self.head.binarize(prob_map, thresh_map)

    def forward(self, images: Tensor) -> dict[str, Tensor]:
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"DBNet: images must be (B, 3, H, W), got {tuple(images.shape)}")
        h, w = images.shape[-2:]
        if h % INPUT_MULTIPLE or w % INPUT_MULTIPLE:
            raise ValueError(
                f"DBNet: image height and width must be multiples of {INPUT_MULTIPLE}, "
                f"got H={h}, W={w} (pad or resize the batch)"
            )
        return self.head(self.neck(self.backbone(images)))
