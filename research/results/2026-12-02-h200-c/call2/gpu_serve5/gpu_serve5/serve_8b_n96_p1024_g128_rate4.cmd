timeout 100 python3 -m gpuscope bench serve --json --gpu h200 --model llama-3.1-8b --requests 96 --prompt 1024 --gen 128 --rate 4 --seed 0 --timeout 90
