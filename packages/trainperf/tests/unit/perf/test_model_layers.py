"""What a model is made of (``run.json``'s ``"model"``): its convolutions' share of the
parameters decides whether channels_last advice fits it; an older run.json without it reads as
unknown."""

from __future__ import annotations

from pathlib import Path

from torch import nn
from trainperf.probe.model_layers import model_layers
from trainperf.records.files import read_run_record
from trainperf.records.run_info import write_run_info


def test_a_transformer_is_not_convolutional() -> None:
    bert = nn.Sequential(
        nn.Embedding(1000, 64), nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    )
    layers = model_layers(bert)
    assert layers.parameters == sum(p.numel() for p in bert.parameters())
    assert (layers.conv_parameters, layers.conv_modules) == (0, 0)
    assert not layers.convolutional


def test_a_cnn_is_and_a_vit_patch_embedding_is_not() -> None:
    cnn = nn.Sequential(nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.Flatten())
    layers = model_layers(cnn)
    assert layers.conv2d_modules == 2
    assert layers.conv_parameters == layers.parameters
    assert layers.convolutional
    # a ViT: one 16x16 patch convolution in front of large linear layers (<10 % of parameters)
    vit = nn.Sequential(nn.Conv2d(3, 64, 16, stride=16), nn.Flatten(), nn.Linear(64, 16384))
    assert model_layers(vit).conv2d_modules == 1
    assert not model_layers(vit).convolutional
    # a 1-D convolution is not a channels_last layout
    assert not model_layers(nn.Sequential(nn.Conv1d(8, 8, 3))).convolutional


def test_a_shared_parameter_counts_once() -> None:
    conv = nn.Conv2d(4, 4, 3)
    twice = nn.Sequential(conv, nn.ReLU(), conv)
    assert model_layers(twice).parameters == sum(p.numel() for p in conv.parameters())


def test_an_older_run_json_reads_without_it(tmp_path: Path) -> None:
    write_run_info(tmp_path, {"lightning_module": "Net"})
    assert read_run_record(tmp_path).model is None
    write_run_info(tmp_path, {"model": {"parameters": 10, "conv_parameters": 9}})
    model = read_run_record(tmp_path).model
    assert model is not None
    assert model.conv_share_pct == 90.0
    assert not model.convolutional  # no 2-D convolution module recorded
