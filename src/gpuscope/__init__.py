"""gpuscope: estimate, measure and explain LLM workloads on accelerators."""

__version__ = "0.1.0"
