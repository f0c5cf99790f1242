"""Microbenchmarks of a device's ceilings (matmul per dtype, memory bandwidth, host link), their timing method, and the
calibration TOML written from them."""
