python3 research/scripts/gpu_moe_generate.py --part moe --budget-s 35  # part moe, layers 4
