"""Serving under continuous batching: `plan_serve(ServeRequest, hardware) -> ServeEstimate` (api.py)."""

from gpuscope.estimate.serve.api import ServeEstimate, ServeRequest, plan_serve

__all__ = ["ServeEstimate", "ServeRequest", "plan_serve"]
