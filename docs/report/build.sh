#!/usr/bin/env bash
# Rebuild docs/report/h200.html from the stored H200 results: the measurement files research/results/manifest.toml
# lists (the ones research/tests/test_results.py checks) and the two-GPU collectives sweep, each planned on the
# catalog's H200 entry. Screenshots: docs/report/screenshots.py. Run from the repository root.
set -euo pipefail
records=()
for f in $(python3 -c "
import tomllib
m = tomllib.load(open('research/results/manifest.toml', 'rb'))
seen = []
for s in m['set']:
    for r in s['records']:
        p = f\"research/results/{s['dir']}/{r}\"
        if p not in seen:
            seen.append(p)
print('\n'.join(seen + ['research/results/2026-11-29-h200-x2/collectives.jsonl']))"); do
  records+=(--records "$f")
done
gpuscope report "${records[@]}" --title "gpuscope: the stored H200 results (research/results)" \
  --out docs/report/h200.html
