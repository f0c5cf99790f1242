timeout 70 python3 -m gpuscope bench serve --json --gpu h200 --model llama-3.1-8b --requests 192 --prompt 512 --gen 128 --concurrency 64 --timeout 60
