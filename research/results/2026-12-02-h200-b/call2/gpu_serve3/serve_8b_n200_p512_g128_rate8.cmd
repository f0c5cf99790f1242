timeout 75 python3 -m gpuscope bench serve --json --gpu h200 --model llama-3.1-8b --requests 200 --prompt 512 --gen 128 --rate 8 --seed 0 --timeout 65
