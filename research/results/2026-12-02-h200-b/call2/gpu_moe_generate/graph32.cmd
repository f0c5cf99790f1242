python3 research/scripts/gpu_moe_generate.py --part graph32 --budget-s 22  # part graph32, layers 8
