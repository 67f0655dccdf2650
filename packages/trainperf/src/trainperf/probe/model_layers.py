"""What a model is made of, counted once: its parameters and convolutions.

What a model is made of, counted once (no forward, no device read): its parameters and those of
its convolutions, so advice that only fits convolutional models (channels_last) is given only to
them. Recorded in ``run.json``'s ``"model"``
(:class:`~trainperf.records.run_record.ModelLayers`)."""

from __future__ import annotations

from torch import nn

from trainperf.records.run_record import ModelLayers

__all__ = ["model_layers"]

_CONV = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)
_CONV2D = (nn.Conv2d, nn.ConvTranspose2d)


def model_layers(model: nn.Module) -> ModelLayers:
    """The :class:`ModelLayers` of ``model``: each parameter counted once (shared ones too), a
    convolution's own parameters (weight, bias) counted as the convolution's."""
    conv = [m for m in model.modules() if isinstance(m, _CONV)]
    conv_ids = {id(p) for m in conv for p in m.parameters(recurse=False)}
    seen: set[int] = set()
    total = in_conv = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        in_conv += p.numel() if id(p) in conv_ids else 0
    return ModelLayers(
        parameters=total,
        conv_parameters=in_conv,
        conv_modules=len(conv),
        conv2d_modules=sum(isinstance(m, _CONV2D) for m in conv),
    )
