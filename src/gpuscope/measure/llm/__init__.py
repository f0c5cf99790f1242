"""LLM inference and training workloads on one device, and the decode engines and model changes they measure (graph
decode, deferred stop check, fused projections, MoE routing counts)."""
