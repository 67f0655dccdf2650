"""Moved: split by record family (this path works until 0.3).

Split by record family (this path works until 0.3): the record base in
:mod:`trainperf.records.schema`, ``run.json``'s record in :mod:`~trainperf.records.run_record`,
epoch and interval records in :mod:`~trainperf.records.epochs`, the monitors' in
:mod:`~trainperf.records.monitoring`, ``trainperf try``'s in :mod:`~trainperf.records.try_record`
and the epoch-end scans' in :mod:`~trainperf.records.epoch_scans`."""

from trainperf.core.moved import split_module

__getattr__ = split_module(
    __name__,
    [
        f"trainperf.records.{name}"
        for name in (
            "schema",
            "run_record",
            "epochs",
            "monitoring",
            "try_record",
            "epoch_scans",
            "framework_info",
        )
    ],
)
