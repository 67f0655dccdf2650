"""The neutral recording layer below the framework adapters.

The neutral recording layer below the framework adapters (``trainperf.lightning``,
``trainperf.loop``, ``trainperf.hf``): stage windows and their state, the CUDA-event clock, the
cross-rank epoch exchange, run files, profiler settings and the epoch report's parts. Nothing
here imports a training framework."""
