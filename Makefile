# Two commands do all the set-up on a fresh Debian 12 machine:
#   make run   - Sluice with demo backends on a private PostgreSQL under var/
#   make test  - the whole test suite (real nginx, real PostgreSQL, real backends)
.PHONY: run test setup bench clean

setup:
	@scripts/setup.sh

run: setup
	.venv/bin/sluice up

test: setup
	.venv/bin/pytest -q $(PYTEST_ARGS)

bench: setup
	.venv/bin/python bench/gateway.py

clean:
	rm -rf var .pytest_cache
