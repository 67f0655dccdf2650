"""The run-folder contract: one typed, versioned record per file kind.

The run-folder contract: one typed, versioned record per file kind (run, epoch, interval,
resource sample / summary, alert, profiler window, try, growth, recompiles, lifecycle), what a run
records about its process, and the command a run was started with."""
