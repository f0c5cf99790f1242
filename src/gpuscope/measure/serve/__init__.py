"""Serving measurements: the HTTP load generator (loadgen.py), transformers' continuous batching in-process
(inprocess.py), a launched `transformers serve` (launch.py, run.py), and the metrics all three share (metrics.py)."""
