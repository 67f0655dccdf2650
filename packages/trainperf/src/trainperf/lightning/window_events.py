"""The moments of Lightning's action stream that open and close the recorder's windows.

Lightning's hook names (the adapter's words, so they stay in the adapter), recognised by name
(independent of which callback or module dispatched it): one small integer per event, so the
recorder's hot path compares integers."""

from __future__ import annotations

from trainperf.core.actions import MODULE, STRATEGY

EV_NONE = 0
EV_TRAIN_EPOCH_START = 1
EV_TRAIN_END = 2
EV_VAL_START = 3
EV_VAL_END = 4  # the strategy's on_validation_end: the last action of a validation run
EV_TEST_START = 5
EV_TEST_END = 6
EV_TRAIN_FETCH = 7
EV_TRAIN_BATCH_END = 8  # the module's on_*_batch_end: the last action of a batch
EV_VAL_BATCH_END = 9
EV_TEST_BATCH_END = 10
EV_BEFORE_BACKWARD_DONE = 11  # the module's on_before_backward: backward runs right after
EV_AFTER_BACKWARD = 12  # any on_after_backward: backward has returned
EV_FIT_START = 13
_START_EVENTS = {
    "on_train_epoch_start": EV_TRAIN_EPOCH_START,
    "on_train_end": EV_TRAIN_END,
    "on_validation_start": EV_VAL_START,
    "on_test_start": EV_TEST_START,
    "train_dataloader_next": EV_TRAIN_FETCH,
    "on_after_backward": EV_AFTER_BACKWARD,
    "on_fit_start": EV_FIT_START,
}
_MODULE_STOP_EVENTS = {
    "on_train_batch_end": EV_TRAIN_BATCH_END,
    "on_validation_batch_end": EV_VAL_BATCH_END,
    "on_test_batch_end": EV_TEST_BATCH_END,
    "on_before_backward": EV_BEFORE_BACKWARD_DONE,
}
_STRATEGY_STOP_EVENTS = {"on_validation_end": EV_VAL_END, "on_test_end": EV_TEST_END}
BATCH_END_STAGE = {
    EV_TRAIN_BATCH_END: "train",
    EV_VAL_BATCH_END: "val",
    EV_TEST_BATCH_END: "test",
}


def window_event(kind: str, hook: str) -> int:
    """The event of an action of ``kind`` (``trainperf.core.actions``) running ``hook``; ``EV_NONE``
    for most."""
    event = _START_EVENTS.get(hook, EV_NONE)
    if kind == MODULE:
        return _MODULE_STOP_EVENTS.get(hook, event)
    if kind == STRATEGY:
        return _STRATEGY_STOP_EVENTS.get(hook, event)
    return event
