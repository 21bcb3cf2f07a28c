#!/bin/bash
# One gateway replica of docker-compose.yml: `sluice gateway` (nginx + Lua; it
# registers with SLUICE_CONTROL_PLANE_URL and heartbeats) with the log shipper beside
# it, reading the replica's own access log. Compose has no sidecars (on Kubernetes the
# shipper is a container of the gateway's pod), so this script is the pair: when
# either exits, it stops the other and exits non-zero, and compose's restart policy
# starts the replica again.
set -uo pipefail

prefix=${SLUICE_GATEWAY_PREFIX:-/var/lib/sluice/gateway}
name=${SLUICE_GATEWAY_NAME:-$(hostname)}
addr=$(hostname -i | awk '{print $1}')
export SLUICE_GATEWAY_NAME="$name"
# where the controller reaches this replica's internal listener
export SLUICE_GATEWAY_ADVERTISE_URL=${SLUICE_GATEWAY_ADVERTISE_URL:-http://$addr:${SLUICE_INTERNAL_PORT:-8001}}

stop() {
    kill -TERM $(jobs -p) 2>/dev/null
    wait
}
trap 'stop; exit 0' TERM INT

SLUICE_ACCESS_LOGS="$name=$prefix/logs/access.log" sluice shipper &
sluice gateway --prefix "$prefix" "$@" &
wait -n
status=$?
echo "gateway.sh: a process exited with status $status; stopping the replica" >&2
stop
exit $(( status == 0 ? 1 : status ))
