"""``ProfilerCallback`` where ``004_…`` of the original project's documents puts it
(``../shared/seeds``): the toolkit's class, :class:`trainperf.lightning.ProfilerCallback`, which
takes the seed's flat arguments (``profile_epochs``, ``profile_steps``, ``warmup_steps``, ...)
as well as its grouped ``schedule`` / ``trace`` settings."""

from trainperf.lightning import ProfilerCallback, ProfileSchedule, TraceOptions

__all__ = ["ProfileSchedule", "ProfilerCallback", "TraceOptions"]
