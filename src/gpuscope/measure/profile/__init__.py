"""torch.profiler runs reduced to the summary the doctor's rules read: inside your code, around a script, or around one
of gpuscope's workloads."""
