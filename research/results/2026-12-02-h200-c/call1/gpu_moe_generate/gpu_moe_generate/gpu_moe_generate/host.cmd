python3 research/scripts/gpu_moe_generate.py --part host --budget-s 32 --gen 12  # part host, layers 16
