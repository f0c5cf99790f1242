# Shared by research/scripts/gpu_session_*.sh (source it after setting W, the work folder, and BUNDLE, the archive's name).
# step NAME LIMIT CMD...: run CMD bounded by `timeout` with its stdout/stderr in $W/NAME.out/.err, log the return code
# and seconds to $W/steps.txt, then re-bundle $W into $OUT/$BUNDLE: the device returns at most 8 files, and a call
# stopped at its limit keeps every step finished before it.
step() { local name=$1 limit=$2; shift 2; local t0; t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$W/$name.out" 2> "$W/$name.err"; local rc=$?
  echo "$name rc=$rc $(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')")s" | tee -a "$W/steps.txt"
  tar czf "$OUT/$BUNDLE" -C "$W" . ; }
# want GROUP: whether the command line asked for GROUP (GROUPS_WANTED holds the arguments, or every group).
want() { [[ " $GROUPS_WANTED " == *" $1 "* ]]; }
