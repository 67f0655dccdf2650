"""The parts of ``scripts/gpu_check.py`` (the command and its plan), one module per job:

* ``preflight``: the GPU, the versions, and the wheel check (what the device machine lacks and
  how it is carried there, with the device tool's command);
* ``runs``: the training runs' overrides, running a logged subprocess, the logs archive;
* ``figures``: throughput, phase split and MFU of a run directory; CUDA events against
  synchronized phase times;
* ``nvml``: our NVML sampler beside ``nvidia-smi`` at the same moment, while training;
* ``arms``: the fast-path arms (batch 16 / 32 / 64, workers half / all cores, ``model.compile``),
  their overrides, runs and per-arm figures;
* ``budget``: each part's and arm's expected seconds on the device machine (``--plan``);
* ``trace``: what the document shows of ``trainperf analyze``, and the trace fixture;
* ``seams``: the seam tests and their JUnit counts;
* ``check``: one run of the check, part by part;
* ``doc``: the Markdown document.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
