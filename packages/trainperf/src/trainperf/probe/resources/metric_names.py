"""The resource monitor's metric names and their meanings.

The resource monitor's metric names and their meanings (stable: the loggers, the JSON-lines
file and the report use these names), and the NVML throttle-reason bits they decode."""

from __future__ import annotations

MB = float(1 << 20)
PHASE_NAMES = ("train", "val", "test", "idle")

# NVML clock-event ("throttle") reason bits (stable NVML API values).
THERMAL_MASK = 0x8 | 0x20 | 0x40  # HW slowdown, SW thermal, HW thermal
POWER_MASK = 0x80 | 0x4  # HW power brake, SW power cap

# Every metric name (without the "resources/" prefix; ``{i}`` is the index of the GPU among this
# process's CUDA devices, ``{phase}`` one of PHASE_NAMES) -> its meaning.
METRIC_DOCS: dict[str, str] = {
    "process_cpu_percent": "main process CPU, % of one core (all its threads)",
    "process_rss_gb": "main process resident memory, GiB",
    "process_uss_gb": "main process unique memory (USS), GiB (Linux)",
    "process_pss_gb": "main process proportional memory (PSS), GiB (Linux)",
    "process_threads": "main process thread count",
    "process_open_fds": "main process open file descriptors (POSIX)",
    "workers_count": "DataLoader worker processes alive",
    "workers_cpu_percent": "DataLoader workers' CPU summed, % of one core",
    "workers_rss_gb": "DataLoader workers' RSS summed, GiB (counts shared pages many times)",
    "workers_uss_gb": "DataLoader workers' USS summed, GiB",
    "workers_pss_gb": "DataLoader workers' PSS summed, GiB",
    "process_tree_memory_gb": "main RSS + workers' USS, GiB: the run's own memory (leak rule)",
    "system_cpu_percent": "host CPU busy, % of all cores",
    "iowait_percent": "host CPU time in iowait, % of all cores",
    "system_memory_percent": "host memory in use, % (the host, not a container limit)",
    "memory_available_gb": "memory still available, GiB (host, or the cgroup limit if lower)",
    "memory_limit_gb": "memory limit, GiB (host total, or the cgroup limit if lower)",
    "disk_read_mb_s": "host disk reads, MiB/s",
    "disk_write_mb_s": "host disk writes, MiB/s",
    "net_recv_mb_s": "host network received, MiB/s",
    "net_sent_mb_s": "host network sent, MiB/s",
    "checkpoint_dir_free_gb": "free space where checkpoints go, GiB",
    "io_read_mb_s": "bytes read by main process + workers (read calls, page cache included), MiB/s",
    "io_write_mb_s": "bytes written by main process + workers, MiB/s",
    "io_storage_read_mb_s": "bytes main process + workers read from storage, MiB/s",
    "io_{phase}_read_mb": "bytes read by main + workers during the phase so far, MiB",
    "io_{phase}_write_mb": "bytes written by main + workers during the phase so far, MiB",
    "gpu{i}_util_percent": "GPU utilisation (NVML: time a kernel ran), %",
    "gpu{i}_memory_util_percent": "GPU memory-controller utilisation, %",
    "gpu{i}_memory_used_gb": "GPU memory used (all processes), GiB",
    "gpu{i}_memory_total_gb": "GPU memory total, GiB",
    "gpu{i}_power_w": "GPU power draw, W",
    "gpu{i}_power_limit_w": "GPU enforced power limit, W",
    "gpu{i}_temperature_c": "GPU temperature, degrees C",
    "gpu{i}_sm_clock_mhz": "GPU SM clock, MHz",
    "gpu{i}_throttle_reasons": "NVML clock-event reason bit mask",
    "gpu{i}_throttle_thermal": "1 when clocks are cut for heat (HW slowdown / thermal), else 0",
    "gpu{i}_throttle_power": "1 when clocks are cut for power (power cap / brake), else 0",
    "cuda_allocated_gb": "torch allocator: allocated on this process's device, GiB",
    "cuda_reserved_gb": "torch allocator: reserved, GiB",
    "cuda_max_reserved_gb": "torch allocator: peak reserved, GiB",
    "cuda_total_gb": "this process's device memory, GiB",
    "cuda_alloc_retries": "torch allocator: cumulative allocation retries (cache flushes)",
    "cuda_ooms": "torch allocator: cumulative out-of-memory errors",
    "data_wait_share": "training: share (0-1) of wall time between a batch end and the next "
    "batch start (the loop waiting for data), over the last window",
    "train_steps_per_s": "training batches per second over the last window",
    "step_time_median_s": "median training step period, s",
    "last_step_age_s": "seconds since the last completed batch (any stage)",
    "loss_nonfinite": "1 when the latest training loss is NaN or Inf, else 0",
}
