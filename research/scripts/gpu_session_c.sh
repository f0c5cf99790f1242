#!/usr/bin/env bash
# One device call that runs several topic scripts in turn, each bundling its own results into $OUT (see each
# script's header for what it measures and its budget):
#   serve     research/scripts/gpu_serve.sh        (270 s)  transformers continuous batching vs plan serve
#   diffusion research/scripts/gpu_diffusion.sh    (290 s)  SDXL / SVD UNet, VAE, full pipeline vs plan diffusion
#   micro     research/scripts/gpu_micro_lowp.py   (120 s)  int8 / fp8 / bf16 GEMM sweeps vs bench micro
#   master    research/scripts/gpu_train_master.sh (100 s)  7B bf16-master training, tune plan's pick
#   qlora     research/scripts/gpu_qlora.sh        (120 s)  Llama-3.1-8B QLoRA vs plan train --qlora
#   decode    research/scripts/gpu_decode_batch.py  (90 s)  generate / graph-unfused decode profiles by batch
#   NAME      research/scripts/gpu_NAME.sh or .py      any other group: its budget in BUDGET below (a .py writes
#             $OUT/gpu_NAME/run.out; each script's header says what it measures)
# usage (a clean copy of the tree, e.g. `git archive HEAD src research/scripts | tar -x -C .gpucheck`, wheels of
# diffusers, importlib_metadata and bitsandbytes in ../.whl):
#   cd .gpucheck && bash research/scripts/gpu_session_c.sh diffusion serve
# A group whose budget no longer fits in the call's 590 s is skipped and says so in $OUT/session.txt.
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s); LIMIT=${GS_CALL_LIMIT:-590}
log() { echo "$*" | tee -a "$OUT/session.txt"; }
if ls ../.whl*/*.whl > /dev/null 2>&1; then  # the scripts set PYTHONPATH=src: install the wheels where it points
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target src ../.whl*/*.whl \
    > "$OUT/pip.txt" 2>&1 || log "wheel install failed (pip.txt)"
fi
{ nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
  PYTHONPATH=src python3 -c "import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)"
  PYTHONPATH=src python3 -c "import diffusers, bitsandbytes; print('diffusers', diffusers.__version__, 'bnb', bitsandbytes.__version__)"
} > "$OUT/versions.txt" 2>&1
declare -A BUDGET=([serve]=270 [diffusion]=290 [micro]=120 [master]=100 [qlora]=120 [decode]=90 [servecb]=170 [serve6]=90
                  [serve2]=230 [serve3]=150 [serve4]=150 [serve5]=150 [fsdp1]=100 [fsdp2]=100 [fsdp3]=${GS_BUDGET_fsdp3:-90} [diffusion2]=${GS_BUDGET_diffusion2:-160} [diffusion3]=${GS_BUDGET_diffusion3:-120}
                  [qlora2]=${GS_QLORA2_BUDGET:-140} [moe_generate]=${GS_BUDGET_moe_generate:-170} [moe_generate2]=${GS_BUDGET_moe_generate2:-120}
                  [lora3]=${GS_LORA3_BUDGET:-60} [kbit_prep]=${GS_KBIT_PREP_BUDGET:-150} [offload_probe]=${GS_BUDGET_offload_probe:-80} [fsdp_fake]=150)
for g in "$@"; do
  left=$(( LIMIT - ($(date +%s) - T0) ))
  if (( ${BUDGET[$g]:-9999} > left )); then log "$g skipped: budget ${BUDGET[$g]:-?} s > $left s left"; continue; fi
  t=$(date +%s)
  case $g in
    serve) bash research/scripts/gpu_serve.sh ;;
    diffusion) bash research/scripts/gpu_diffusion.sh ;;
    micro) PYTHONPATH=src timeout 120 python3 research/scripts/gpu_micro_lowp.py > "$OUT/micro_lowp.out" 2>&1 ;;
    master) bash research/scripts/gpu_train_master.sh ;;
    qlora) bash research/scripts/gpu_qlora.sh ;;
    decode) PYTHONPATH=src timeout 95 python3 research/scripts/gpu_decode_batch.py > "$OUT/decode_batch.out" 2>&1 ;;
    servecb) PYTHONPATH=src timeout 170 python3 research/scripts/gpu_serve_cb.py --out "$OUT/serve_cb.json" --budget 140 > "$OUT/serve_cb.out" 2>&1 ;;
    *) args_var="GS_ARGS_$g"  # a group's own arguments, e.g. GS_ARGS_diffusion2="offload_model vae"
       if [[ -f research/scripts/gpu_$g.sh ]]; then timeout $(( ${BUDGET[$g]} + 15 )) bash research/scripts/gpu_$g.sh ${!args_var:-}
       elif [[ -f research/scripts/gpu_$g.py ]]; then mkdir -p "$OUT/gpu_$g"
         PYTHONPATH=src timeout $(( ${BUDGET[$g]} + 15 )) python3 research/scripts/gpu_$g.py > "$OUT/gpu_$g/run.out" 2>&1
       else log "unknown group $g"; fi ;;
  esac
  log "$g rc=$? $(( $(date +%s) - t )) s"
done
# The device returns at most 8 files a call: everything under $OUT goes back as one archive (all.tgz) beside session.txt.
( cd "$OUT" && tar -czf /tmp/gs_all.tgz --exclude=session.txt . && find . -mindepth 1 ! -name session.txt -delete \
  && mv /tmp/gs_all.tgz all.tgz ) || log "packing \$OUT failed"
