"""The bench session as a library: run cases (each workload in its own process), store every result with its
provenance as soon as it finishes, put the planner's estimate beside it, and sum up how close the estimates came.

- session.py: Session (store, run id, resume set, what this call measured) and the BenchRun it ends as;
- bench.py: the workload loop (NVML sampled meanwhile) and ``run_cases``, the one-call entry; micro.py the micro
  loop; calibration.py bench all's own calibration and the host-cost fits; fit.py the GPU set fitted to a device;
  dist.py the torchrun jobs (distributed training, compression, collectives);
- estimate.py: the estimate beside a stored record; accuracy.py: the one accuracy summary (bench and
  `results compare` alike).

Nothing here prints: a Session's Reporter hears what happens (the CLI's prints it).
"""
