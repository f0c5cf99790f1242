"""Diffusion and video generation on a device: diffusers modules built from a folder's configs with random weights
(build.py), fed as their pipelines feed them (inputs.py), each component and the whole pipeline timed with device
events, peak memory and NVML energy (run.py, loop.py, timing.py), the points of one build measured in one process
(child.py, started by spawn.py)."""
