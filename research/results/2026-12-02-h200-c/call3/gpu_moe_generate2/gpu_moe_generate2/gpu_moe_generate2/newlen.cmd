python3 research/scripts/gpu_moe_generate.py --part newlen --layers 16 --budget-s 30 --gen 12  # part newlen, layers 16
