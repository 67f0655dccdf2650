"""DBNet: backbone/neck/head shapes, weights files, input checks and a tiny overfit run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from ocr.models.dbnet import DBHead, DBNet, FPNNeck, ResNetBackbone
from ocr.models.loss import DBLoss

SMALL = {"layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64]}


@pytest.mark.parametrize(
    ("kwargs", "channels"),
    [
        ({"depth": 18}, [64, 128, 256, 512]),
        ({"depth": 34}, [64, 128, 256, 512]),
        ({"depth": 50}, [256, 512, 1024, 2048]),
        ({"depth": None, "layers": [1, 1, 1, 1], "widths": [16, 32, 64, 128]}, [16, 32, 64, 128]),
        (
            {"layers": [1, 2, 1, 1], "widths": [8, 8, 16, 16], "block": "bottleneck"},
            [32, 32, 64, 64],
        ),
        ({**SMALL, "stem_channels": 12}, [8, 16, 32, 64]),
        # A standard depth fixes its block: overriding only depth in the YAML (which also
        # says block: basic) must give a real ResNet-50.
        ({"depth": 50, "block": "basic"}, [256, 512, 1024, 2048]),
    ],
)
def test_backbone_stage_shapes(kwargs: dict, channels: list[int]) -> None:
    backbone = ResNetBackbone(**kwargs)
    assert backbone.out_channels == channels
    features = backbone(torch.randn(2, 3, 64, 96))
    assert [tuple(f.shape) for f in features] == [
        (2, c, 64 // s, 96 // s) for c, s in zip(channels, (4, 8, 16, 32), strict=True)
    ]


def test_backbone_matches_torchvision_layout() -> None:
    # Parameter counts of torchvision's resnet18 / resnet50 without the 1000-class fc layer.
    assert sum(p.numel() for p in ResNetBackbone(18).parameters()) == 11_689_512 - 513_000
    assert sum(p.numel() for p in ResNetBackbone(50).parameters()) == 25_557_032 - 2_049_000
    keys = ResNetBackbone(18).state_dict().keys()
    assert {"conv1.weight", "bn1.running_var", "layer1.0.conv2.weight", "layer4.1.bn2.bias"} <= keys
    assert {"layer2.0.downsample.0.weight", "layer2.0.downsample.1.running_mean"} <= keys
    assert "layer1.0.downsample.0.weight" not in keys  # identity shortcut in a basic layer1
    assert "layer1.0.conv3.weight" in ResNetBackbone(50).state_dict()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"depth": 20}, "depth must be one of"),
        ({"depth": None}, "give either depth or layers"),
        ({"layers": [1, 1, 1]}, "layers must be 4 positive ints"),
        ({"layers": [1, 1, 1, 1], "widths": [8, 0, 8, 8]}, "widths must be 4 positive ints"),
        ({"block": "wide"}, "block must be one of"),
    ],
)
def test_backbone_rejects_bad_architecture(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ResNetBackbone(**kwargs)


def test_init_is_standard() -> None:
    net = DBNet(SMALL, neck_channels=32)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            assert torch.all(m.weight == 1)
            assert torch.all(m.bias == 0)
    conv = net.backbone.conv1.weight
    # Kaiming normal, fan_out, ReLU: std = sqrt(2 / (out_channels * k * k)).
    expected_std = (2.0 / (conv.shape[0] * 7 * 7)) ** 0.5
    assert conv.std().item() == pytest.approx(expected_std, rel=0.25)


def test_dbnet_outputs_train_and_eval() -> None:
    torch.manual_seed(0)
    net = DBNet(SMALL, neck_channels=32)
    images = torch.randn(2, 3, 64, 96)
    out = net.train()(images)
    assert set(out) == {"prob_logits", "prob_map", "thresh_map", "binary_map"}
    for value in out.values():
        assert value.shape == (2, 1, 64, 96)
        assert value.dtype == torch.float32
    torch.testing.assert_close(out["prob_map"], torch.sigmoid(out["prob_logits"]))
    assert out["thresh_map"].min() >= 0
    assert out["thresh_map"].max() <= 1
    torch.testing.assert_close(
        out["binary_map"], torch.sigmoid(50.0 * (out["prob_map"] - out["thresh_map"]))
    )
    with torch.no_grad():
        out = net.eval()(images)
    assert set(out) == {"prob_logits", "prob_map", "thresh_map"}


def test_dbnet_accepts_hydra_config_for_backbone() -> None:
    # Hydra passes DictConfig / ListConfig, not dict / list.
    cfg = OmegaConf.create({"layers": [1, 1, 1, 1], "widths": [8, 16, 32, 64]})
    net = DBNet(cfg, neck_channels=16, k=10.0)
    assert net.backbone.out_channels == [8, 16, 32, 64]
    assert net.head.k == 10.0
    assert net(torch.randn(1, 3, 64, 64))["prob_map"].shape == (1, 1, 64, 64)
    backbone = ResNetBackbone(**SMALL)
    assert DBNet(backbone, neck_channels=16).backbone is backbone
    with pytest.raises(TypeError, match="backbone must be"):
        DBNet([18])  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(1, 3, 64, 80), (1, 3, 48, 64), (1, 1, 64, 64), (3, 64, 64)])
def test_dbnet_rejects_bad_input_shapes(shape: tuple[int, ...]) -> None:
    net = DBNet(SMALL, neck_channels=16)
    with pytest.raises(ValueError, match=r"multiples of 32|must be \(B, 3, H, W\)"):
        net(torch.randn(*shape))


def test_neck_and_head_shapes() -> None:
    neck = FPNNeck([8, 16, 32, 64], inner_channels=32)
    feats = [torch.randn(2, c, 16 // 2**i, 24 // 2**i) for i, c in enumerate([8, 16, 32, 64])]
    fused = neck(feats)
    assert fused.shape == (2, 32, 16, 24)
    head = DBHead(32).eval()
    out = head(fused)
    assert out["prob_logits"].shape == (2, 1, 64, 96)
    with pytest.raises(ValueError, match="multiple of 4"):
        FPNNeck([8, 16, 32, 64], inner_channels=30)


def test_binarize_is_float32_under_autocast() -> None:
    head = DBHead(16, k=50.0)
    prob = torch.tensor([0.50, 0.52, 0.60]).to(torch.bfloat16)
    thresh = torch.tensor([0.50, 0.50, 0.50]).to(torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        binary = head.binarize(prob, thresh)
    assert binary.dtype == torch.float32
    expected = torch.sigmoid(50.0 * (prob.float() - thresh.float()))
    torch.testing.assert_close(binary, expected)


def test_forward_under_autocast_returns_float32() -> None:
    net = DBNet(SMALL, neck_channels=16).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(torch.randn(1, 3, 64, 64))
    assert all(v.dtype == torch.float32 for v in out.values())


def _state_with_fc(backbone: ResNetBackbone) -> dict[str, torch.Tensor]:
    state = {k: v.clone() for k, v in backbone.state_dict().items()}
    state["fc.weight"] = torch.randn(10, backbone.out_channels[-1])
    state["fc.bias"] = torch.randn(10)
    return state


@pytest.mark.parametrize("wrapper", [None, "state_dict", "model"])
def test_weights_round_trip(tmp_path: Path, wrapper: str | None) -> None:
    torch.manual_seed(1)
    source = ResNetBackbone(**SMALL)
    for m in source.modules():  # non-default BN statistics must survive the trip too
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_()
            m.running_var.uniform_(0.5, 2.0)
    state = _state_with_fc(source)
    path = tmp_path / "resnet.pth"
    torch.save(state if wrapper is None else {wrapper: state, "epoch": 3}, path)

    loaded = ResNetBackbone(**SMALL, weights=str(path))
    for key, value in source.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, msg=key)
    source.eval()
    loaded.eval()
    x = torch.randn(1, 3, 64, 64)
    torch.testing.assert_close(loaded(x)[-1], source(x)[-1])


def test_weights_without_num_batches_tracked_load(tmp_path: Path) -> None:
    # Older torchvision checkpoints predate BatchNorm's num_batches_tracked buffer.
    source = ResNetBackbone(**SMALL)
    state = {k: v for k, v in source.state_dict().items() if "num_batches_tracked" not in k}
    path = tmp_path / "old.pth"
    torch.save(state, path)
    loaded = ResNetBackbone(**SMALL, weights=path)
    torch.testing.assert_close(loaded.conv1.weight, source.conv1.weight)


def test_weights_missing_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "resnet18.pth"
    with pytest.raises(FileNotFoundError, match=r"resnet18\.pth"):
        ResNetBackbone(**SMALL, weights=str(path))


def test_weights_shape_mismatch_names_file_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "wide.pth"
    torch.save(ResNetBackbone(layers=[1, 1, 1, 1], widths=[16, 32, 64, 128]).state_dict(), path)
    with pytest.raises(ValueError, match=r"wide\.pth") as info:
        ResNetBackbone(**SMALL, weights=path)
    assert "shape mismatches: conv1.weight (file (16, 3, 7, 7) vs model (8, 3, 7, 7))" in str(
        info.value
    )
    assert "more" in str(info.value)  # the long list is summarised


def test_weights_missing_and_unexpected_keys(tmp_path: Path) -> None:
    state = _state_with_fc(ResNetBackbone(**SMALL))
    del state["layer3.0.conv1.weight"]
    state["head.weight"] = torch.zeros(1)
    path = tmp_path / "partial.pth"
    torch.save(state, path)
    with pytest.raises(ValueError, match=r"partial\.pth") as info:
        ResNetBackbone(**SMALL, weights=path)
    message = str(info.value)
    assert "missing keys: layer3.0.conv1.weight" in message
    assert "unexpected keys: head.weight" in message
    assert "fc." not in message


def test_weights_file_without_state_dict(tmp_path: Path) -> None:
    path = tmp_path / "junk.pth"
    torch.save({"epoch": 3, "lr": 0.1}, path)
    with pytest.raises(ValueError, match=r"junk\.pth holds neither a state_dict"):
        ResNetBackbone(**SMALL, weights=path)


def _synthetic_sample() -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    prob = torch.zeros(1, 64, 64)
    prob[0, 10:22, 8:50] = 1.0
    prob[0, 36:52, 20:60] = 1.0
    thresh = torch.full((1, 64, 64), 0.3)
    thresh[0, 6:26, 4:54] = 0.7
    thresh[0, 32:56, 16:64] = 0.7
    thresh[prob > 0] = 0.3
    image = 0.2 * torch.randn(1, 3, 64, 64) + prob[:, None] * 1.5
    batch = {
        "prob_maps": prob,
        "prob_masks": torch.ones_like(prob),
        "thresh_maps": thresh,
        "thresh_masks": torch.ones_like(prob),
    }
    return image, batch


def test_tiny_model_overfits_one_image() -> None:
    torch.manual_seed(0)
    net = DBNet(SMALL, neck_channels=32).train()
    loss_fn = DBLoss()
    image, batch = _synthetic_sample()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss, _ = loss_fn(net(image), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert min(losses[-5:]) < 0.4 * losses[0]
    # The probability map itself has learned the rectangles.
    net.eval()
    with torch.no_grad():
        prob = net(image)["prob_map"][0, 0]
    inside = prob[batch["prob_maps"][0] > 0].mean()
    outside = prob[batch["prob_maps"][0] == 0].mean()
    assert inside > 0.5 > outside
