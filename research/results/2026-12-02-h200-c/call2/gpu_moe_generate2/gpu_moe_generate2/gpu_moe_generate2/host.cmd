python3 research/scripts/gpu_moe_generate.py --part host --layers 32 --budget-s 36 --gen 12 --host-sizes 1x1024,8x2048,16x1024,4x2048,1x2048,1x1024 --prof-cases 1,4  # part host, layers 32
