# Sourced by the device-call scripts (gpu-candidate.sh, gpu-final.sh): `step NAME SECONDS LOG
# COMMAND...` runs COMMAND bounded by SECONDS with its output in LOG, and appends a line to the
# array `summary` (name, exit status, seconds, the log's last "passed", "SUMMARY" or "NOT met"
# line); it returns the command's status, so a step that fails or hangs never stops the call.
summary=()
step() {
  local name=$1 seconds=$2 log=$3
  shift 3
  local start=$SECONDS
  timeout "$seconds" "$@" > "$log" 2>&1
  local rc=$?
  local last
  last=$(grep -E "passed|SUMMARY|NOT met" "$log" | tail -n 1)
  summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - start)) "$last")")
  return $rc
}
