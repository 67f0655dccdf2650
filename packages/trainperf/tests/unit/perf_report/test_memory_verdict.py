"""The verdict on issue 22's memory evidence, from a run directory written here: workers whose
USS grows within what the dataset's Python list explains are copy-on-read (the attribute named,
persistent workers as the candidate); the main process's steady growth is reported unless a
memory_creep finding explains it."""

from __future__ import annotations

from pathlib import Path

from trainperf.analysis.run import load_run
from trainperf.analysis.stages import summarize_stages
from trainperf.analysis.verdict import judge
from trainperf.core.findings import Finding
from trainperf.records.files import RecordWriter, write_run_record
from trainperf.records.monitoring import ResourceSample

MB = float(1 << 20)


def _run(tmp_path: Path, containers: bool, worker_growth_mb: float, main_growth_mb: float) -> Path:
    if containers:
        write_run_record(
            tmp_path,
            {
                "dataset_containers": [
                    {
                        "attribute": "RowsDataset.rows",
                        "kind": "list",
                        "length": 1_800_000,
                        "python_bytes": int(200 * MB),
                        "sampled": True,
                    }
                ]
            },
        )
    else:
        write_run_record(tmp_path, {"cpu_count": 2})
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(
        "data:\n  num_workers: 2\n  persistent_workers: false\n"
    )
    writer = RecordWriter(ResourceSample.path(tmp_path))
    for k in range(12):
        epoch = k // 4
        writer.write(
            ResourceSample(
                t=1000.0 + 10.0 * k,
                phase="train",
                epoch=epoch,
                metrics={"resources/process_uss_gb": (500 + main_growth_mb * k) / 1024.0},
                workers_uss={
                    "101": (40 + worker_growth_mb * k) * MB,
                    "102": (42 + worker_growth_mb * k) * MB,
                },
            )
        )
    writer.close()
    return tmp_path


def _findings(root: Path) -> dict[str, Finding]:
    run = load_run(root)
    return {f.id: f for f in judge(run, summarize_stages(run.epochs))}


def test_copy_on_read_named_with_candidate(tmp_path: Path) -> None:
    found = _findings(_run(tmp_path, containers=True, worker_growth_mb=10.0, main_growth_mb=0.0))
    f = found["worker_memory"]
    assert "RowsDataset.rows" in f.title
    assert f.evidence["attribute"] == "RowsDataset.rows"
    overrides = [c.override for c in f.candidates]
    assert "data.persistent_workers=true" in overrides
    assert "process_memory_growth" not in found


def test_without_containers_growth_is_not_copy_on_read(tmp_path: Path) -> None:
    found = _findings(_run(tmp_path, containers=False, worker_growth_mb=10.0, main_growth_mb=0.0))
    f = found["worker_memory"]
    assert "keep growing" in f.title
    assert "attribute" not in f.evidence


def test_main_process_growth_reported(tmp_path: Path) -> None:
    found = _findings(_run(tmp_path, containers=False, worker_growth_mb=0.0, main_growth_mb=2.0))
    assert "worker_memory" not in found
    f = found["process_memory_growth"]
    assert "12.0 MB/min" in f.title
