# Sourced by each finding's server script: start_server FLAGS... starts
# llama-server ($server, on $model) on 127.0.0.1 at an ephemeral port with
# FLAGS, waits for /health, and sets $url; it is stopped by its PID when the
# script exits. A server that exits while starting makes start_server
# return 3 with $log_file holding its log (the caller decides); no answer
# in 60 s exits 2.
dir=$(mktemp -d) pid= url= log_file=
log_file=$dir/log
stop_server() { [[ -z $pid ]] || { kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; }; rm -rf "$dir"; }
trap stop_server EXIT
start_server() {
  "$server" -m "$model" --host 127.0.0.1 --port 0 -t 1 --no-warmup "$@" > "$log_file" 2>&1 & pid=$!
  for _ in $(seq 600); do
    url=$(sed -n 's|.*listening on \(http://127.0.0.1:[0-9]*\).*|\1|p' "$log_file" | head -1)
    [[ -n $url ]] && curl -sf "$url/health" > /dev/null && return 0
    if ! kill -0 "$pid" 2> /dev/null; then
      wait "$pid"; server_rc=$? pid=
      return 3
    fi
    sleep 0.1
  done
  echo "llama-server did not answer /health in 60 s"; exit 2
}
