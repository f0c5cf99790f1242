python3 research/scripts/gpu_moe_generate.py --part hostmix --layers 4 --budget-s 40 --mix-prompt 512  # part hostmix, layers 4
