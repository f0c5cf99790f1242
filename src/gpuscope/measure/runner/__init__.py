"""Runners: one measurement case in its own process (run_case: one JSON line out), and a list of them each under its
timeout with resume (suite). The cases and their kinds are gpuscope.workloads."""
