timeout 200 python3 -m gpuscope bench serve --json --gpu h200 --model llama-3.1-8b --requests 1024 --prompt 128 --gen 128 --timeout 190
