timeout 40 python3 - sdxl fp16 (alloc probe, inline in gpu_diffusion3.sh)
