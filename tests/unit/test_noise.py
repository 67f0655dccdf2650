"""ocr.noise: the known third-party noise is dropped by message, nothing else is."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator

import pytest

from ocr.noise import quiet_console


@pytest.fixture
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        quiet_console()
        yield
    logging.captureWarnings(False)


def _emit_from(module: str, message: str, category: type[Warning]) -> None:
    warnings.warn_explicit(message, category, filename=f"{module}.py", lineno=1, module=module)


def test_lightning_tips_and_summary_notice_are_dropped_other_info_kept(
    quiet: None, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    with caplog.at_level(logging.INFO):
        log.info("💡 Tip: For seamless cloud logging ... try installing [litlogger](...)")
        log.info("💡 Tip: For seamless cloud uploads ... [litmodels](...)")
        log.info("Trainer already configured with model summary callbacks: [...]")
        log.info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]


def test_only_lightnings_pytree_deprecation_is_ignored(quiet: None) -> None:
    msg = "`isinstance(treespec, LeafSpec)` is deprecated, use ... instead."
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        quiet_console()  # after simplefilter: its narrow filter takes precedence
        _emit_from("lightning.pytorch.utilities._pytree", msg, FutureWarning)
        _emit_from("user_code", msg, FutureWarning)  # the same message from elsewhere shows
        _emit_from("lightning.pytorch.utilities._pytree", "another change", FutureWarning)
    assert [(w.filename, str(w.message)) for w in seen] == [
        ("user_code.py", msg),
        ("lightning.pytorch.utilities._pytree.py", "another change"),
    ]


def test_warnings_reach_logging_on_one_line(quiet: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="py.warnings"):
        warnings.warn("a user's warning", UserWarning, stacklevel=1)
    (record,) = [r for r in caplog.records if r.name == "py.warnings"]
    assert "a user's warning" in record.getMessage()
    assert not record.getMessage().endswith("\n")


def test_the_summarys_mixed_precision_notice_is_dropped_other_precisions_kept(
    quiet: None,
) -> None:
    """Mixed precision keeps 32-bit parameters: the summary's size is right, its notice noise."""
    tail = (
        " is not supported by the model summary.  Estimated model size in MB will not be accurate."
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        quiet_console()
        for precision in ("bf16-mixed", "16-mixed", "transformer-engine"):
            _emit_from(
                "lightning.pytorch.utilities.model_summary.model_summary",
                f"Precision {precision}{tail}",
                UserWarning,
            )
    assert [str(w.message) for w in seen] == [f"Precision transformer-engine{tail}"]


def test_the_modules_batch_transfer_hook_notice_is_dropped_others_kept(quiet: None) -> None:
    """Our module expands compact batches in on_after_batch_transfer on purpose; Lightning's
    notice for another hook (or a hook in both) still shows."""
    lightning = "lightning.pytorch.trainer.connectors.data_connector"
    ours = (
        "You have overridden `on_after_batch_transfer` in `LightningModule` but have passed in a"
        " `LightningDataModule`. It will use the implementation from `LightningModule` instance."
    )
    other = ours.replace("on_after_batch_transfer", "on_before_batch_transfer")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        quiet_console()
        _emit_from(lightning, ours, UserWarning)
        _emit_from(lightning, other, UserWarning)
    assert [str(w.message) for w in seen] == [other]
