"""``ocr.callbacks.profiler.ProfilerCallback`` as ``003_…`` of the original project's documents
(``../shared/seeds``) imports it: the toolkit's :class:`trainperf.lightning.ProfilerCallback`,
re-exported. It takes the seed's flat arguments as written::

    ProfilerCallback(enabled=True, profile_epochs=[1, 5, 10], profile_steps=100, warmup_steps=5,
                     activities=["cpu", "cuda"], record_shapes=True, with_stack=False,
                     output_dir="profiler_traces", export_chrome_trace=True, log_top_k_ops=15)

and ``ProfilerCallback.analyze_trace(trace_path)`` returns the seed's keys (``top_cpu_ops`` as
``(op_name, time_us)`` pairs, ...). Where each flat argument lands in the grouped settings:
:data:`trainperf.recording.profiler_settings.FLAT_SETTINGS`."""

from trainperf.lightning import ProfilerCallback

__all__ = ["ProfilerCallback"]
