"""Memory growth, judged: each kind of growth with its verdict finding.

The attributes a run keeps that grow epoch after epoch (:mod:`.attributes`, from the epoch scans of
:mod:`trainperf.probe.growth_scan`), the main process's growth no attribute explains
(:mod:`.process`) and the DataLoader workers' memory (:mod:`.workers`)."""
