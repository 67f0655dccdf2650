"""The probe layer: in-process measurement.

In-process measurement: DataLoader worker timing, memory and FLOPs, recompiles, memory
creep, live host-device syncs, the resource sampler."""
