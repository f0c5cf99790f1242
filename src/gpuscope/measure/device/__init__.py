"""Device primitives: the torch device (pick, synchronize, memory, timers, OOM results), provenance, NVML sampling."""
