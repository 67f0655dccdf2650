"""FLOPs of a model on an example input, counted by torch's ``FlopCounterMode``.

The count runs the model once on the *real* input shapes (a forward, and a forward plus a
backward of the sum of its floating outputs), so it follows whatever the model does with those
shapes: strides, channel widths, upsampling. ``FlopCounterMode`` counts the ops that dominate a
network (matmul / linear / convolution / attention, forward and backward; a multiply-add is 2
FLOPs); element-wise ops, pooling and normalisation are not counted, so "FLOPs" here means the
FLOPs of those ops, the same figure Lightning's model summary shows and MFU is defined on.

No Lightning import: this is used by the throughput callback and by plain scripts alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one call of a model on an example input (the whole batch): ``forward_backward``
    is a forward plus the backward of the sum of the outputs, ``None`` when not counted (no
    parameter needs a gradient, or not asked for)."""

    forward: int
    forward_backward: int | None
    batch_size: int
    input_shapes: tuple[tuple[int, ...], ...] = ()

    @property
    def forward_per_sample(self) -> float:
        """Forward FLOPs per sample (what evaluation runs)."""
        return self.forward / max(self.batch_size, 1)

    @property
    def train_per_sample(self) -> float | None:
        """Forward + backward FLOPs per sample (what a training step runs, the optimizer aside)."""
        if self.forward_backward is None:
            return None
        return self.forward_backward / max(self.batch_size, 1)


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    """The tensors in a (nested) output or input: tensors, mappings, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def batch_size_of(example_input: Any) -> int:
    """Samples in an example input: the first dimension of its first tensor (1 for a scalar or
    an input without tensors)."""
    first = next(iter(_tensors(example_input)), None)
    if first is None or first.dim() == 0:
        return 1
    return int(first.shape[0])


def _call(model: nn.Module, example_input: Any) -> Any:
    # Lightning's convention for example_input_array: a tuple is positional arguments, a dict
    # keyword arguments, anything else the single argument.
    if isinstance(example_input, tuple):
        return model(*example_input)
    if isinstance(example_input, Mapping):
        return model(**example_input)
    return model(example_input)


def count_flops(model: nn.Module, example_input: Any, *, backward: bool = True) -> FlopCount:
    """Count the FLOPs of ``model`` on ``example_input`` (see the module doc).

    The model runs in the mode it is in (train or eval: a head may compute more in training)
    and on the device of ``example_input``; no parameter or buffer is changed by the count
    (gradients it makes are dropped, batch-norm running statistics are restored).

    Args:
        example_input: a tensor (one argument), a tuple (positional arguments) or a dict
            (keyword arguments), with the real shapes.
        backward: also count forward + backward (needs a floating output that requires grad).
    """
    # Dropout and friends draw random numbers: fork the generators so counting does not shift
    # the run's random stream (a run with the monitor trains like one without).
    cuda = sorted({int(t.device.index or 0) for t in _tensors(example_input) if t.is_cuda})
    with torch.random.fork_rng(devices=cuda):
        forward, forward_backward = _count(model, example_input, backward)
    shapes = tuple(tuple(int(d) for d in t.shape) for t in _tensors(example_input))
    return FlopCount(
        forward=forward,
        forward_backward=forward_backward,
        batch_size=batch_size_of(example_input),
        input_shapes=shapes,
    )


def _count(model: nn.Module, example_input: Any, backward: bool) -> tuple[int, int | None]:
    # Batch-norm running statistics move on a training-mode forward: keep the model's state.
    saved = {name: buf.detach().clone() for name, buf in model.named_buffers()}
    grads = {name: p.grad for name, p in model.named_parameters()}
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            _call(model, example_input)
        forward = int(counter.get_total_flops())
        forward_backward: int | None = None
        if backward and any(p.requires_grad for p in model.parameters()):
            with torch.enable_grad(), FlopCounterMode(display=False) as counter:
                out = _call(model, example_input)
                losses = [
                    t.float().sum()
                    for t in _tensors(out)
                    if t.is_floating_point() and t.requires_grad
                ]
                if losses:
                    torch.stack(losses).sum().backward()
                    forward_backward = int(counter.get_total_flops())
    finally:
        with torch.no_grad():
            buffers = dict(model.named_buffers())
            for name, value in saved.items():
                buffers[name].copy_(value)
        for name, p in model.named_parameters():
            p.grad = grads.get(name)
    return forward, forward_backward
