# Two commands do all the set-up on a fresh Debian 12 machine:
#   make run   - Sluice with demo backends on a private PostgreSQL under var/
#   make test  - the whole test suite (real nginx, real PostgreSQL, real backends)
.PHONY: run test setup bench bench-realtime clean

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/sluice up

# pytest-xdist: 4 workers on 2 cores (most tests wait on nginx, backends and timers,
# not the CPU); each module runs whole on one worker, the fleet's modules together, the
# slowest folders first (tests/conftest.py). XDIST= runs the suite in one process.
XDIST ?= -n 4 --dist loadfile --no-loadscope-reorder

test: setup
	.venv/bin/pytest -q $(XDIST) $(PYTEST_ARGS)

bench: setup
	.venv/bin/python bench/gateway.py

# what the gateway adds to a realtime (WebSocket) event's round trip (bench/README.md)
bench-realtime: setup
	.venv/bin/python bench/realtime.py

clean:
	rm -rf var .pytest_cache
