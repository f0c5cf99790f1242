python3 research/scripts/gpu_moe_generate.py --part host --tag 7b --host-model qwen2.5-7b --layers 28 --budget-s 18 --gen 12 --host-sizes 1x1024,8x2048,1x1024 --prof-cases   # part host, layers 28
