"""The host under a measurement: its load and preemptions, garbage-collector pauses, the host-speed probe, and the eager
host-cost fits the planner's engine model is calibrated with."""
