timeout 80 python3 -m gpuscope bench serve --json --gpu h200 --model llama-3.1-8b --requests 128 --prompt 512 --gen 128 --rate 10 --seed 0 --timeout 70
