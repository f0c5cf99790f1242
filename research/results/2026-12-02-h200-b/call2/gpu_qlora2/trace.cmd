timeout 30 python3 research/scripts/gpu_qlora2_trace.py --out /tmp/gs_qlora2/trace 
