"""Diffusion and video generation: memory, time and energy of a diffusers pipeline, from its configs alone.

``plan_diffusion(request, hardware)`` (pipeline.py) is the library call; docs/diffusion.md documents it.
"""

from gpuscope.estimate.diffusion.pipeline import plan_diffusion
from gpuscope.estimate.diffusion.request import DiffusionRequest

__all__ = ["DiffusionRequest", "plan_diffusion"]
