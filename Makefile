# spoolmq — the two commands a fresh machine needs:
#   make run    install and start the server on ./data
#   make test   install everything and run lint, types, layer contracts, dead code, the lowest
#               declared dependencies' smoke test and the tests
SHELL := /bin/bash
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null)
ifeq ($(UV),)
UV := $(PYTHON) -m uv
endif
STORE_DIR ?= ./data

.PHONY: run test install bootstrap chromium etcd iproute2 jq fuse lint typecheck contracts deadcode lowest-deps pytest bench bench-tools bench-http clean

# The uv that made uv.lock (the Dockerfile pins the same one).
UV_VERSION := 0.13.9
bootstrap:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv==$(UV_VERSION)"

# The development environment: the runtime dependencies, the Spark extra and the dev tools.
install: bootstrap
	$(UV) sync --frozen --group dev

# Serving needs the runtime dependencies only: a fresh machine installs those and starts.
run: bootstrap
	$(UV) run --frozen spoolmq serve --store-dir $(STORE_DIR)

lint: install
	$(UV) run ruff format --check .
	$(UV) run ruff check .

typecheck: install
	$(UV) run mypy

contracts: install
	$(UV) run lint-imports

# Definitions nothing uses (vulture; what only a framework or a template uses is named in
# scripts/vulture_whitelist.py).
deadcode: install
	$(UV) run vulture

# The lowest versions pyproject.toml allows, in a scratch venv: they must serve a send and a
# pull, with a proxy in front (scripts/smoke_test.py; the floors are true, not hoped for).
LOWEST_VENV := .venv-lowest
lowest-deps: bootstrap etcd
	rm -rf $(LOWEST_VENV)
	$(UV) venv -q $(LOWEST_VENV)
	$(UV) pip install -q --python $(LOWEST_VENV)/bin/python --resolution lowest-direct .
	$(LOWEST_VENV)/bin/python scripts/smoke_test.py $(LOWEST_VENV)/bin

# The admin page tests drive Debian's Chromium (never `playwright install`, which downloads).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@test -x /usr/bin/chromium || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# The cluster tests start Debian's etcd (package etcd-server) on loopback ports.
etcd:
	@test -x /usr/bin/etcd || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq etcd-server >/dev/null; }

# The partition tests (tests/app/test_cluster_partitions.py, as root) put etcd, the brokers
# and the proxy in network namespaces with iproute2's ip and tc.
iproute2:
	@test -x /usr/sbin/ip -o -x /sbin/ip || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq iproute2 >/dev/null; }

# The README's examples (run by tests/test_readme.py) use curl and jq.
jq:
	@test -x /usr/bin/jq -a -x /usr/bin/curl || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq jq curl >/dev/null; }

# The disk-fault tests mount the power-cut file system (tests/powercut_fs.py) with FUSE.
fuse:
	@test -x /usr/bin/fusermount3 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq fuse3 >/dev/null; }

# Two workers (pytest-xdist), a module per worker at a time, the longest modules first; then
# the tests marked serial (brokers failed over on etcd leases under load), alone. Both phases
# run even if the first fails, so that one run reports every failure. PYTEST_WORKERS=0 runs
# the first phase in one process.
PYTEST_WORKERS ?= 2
pytest: install chromium etcd iproute2 jq fuse
	status=0; \
	$(UV) run pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		-m "not serial" || status=$$?; \
	$(UV) run pytest -m serial || status=$$?; \
	exit $$status

test: lint typecheck contracts deadcode lowest-deps pytest

bench: install
	$(UV) run python bench/store_bench.py

# The HTTP bench's load generator and its Redis Streams peer: Debian's wrk and redis-server,
# and redis-py + hiredis put into the venv only (bench tools, not project dependencies).
bench-tools: bootstrap
	$(UV) sync --frozen --group dev --inexact
	@test -x /usr/bin/wrk -a -x /usr/bin/redis-server || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wrk redis-server >/dev/null; }
	@$(UV) run --no-sync python -c "import redis, hiredis" 2>/dev/null || \
		$(UV) pip install -q redis hiredis

bench-http: bench-tools
	$(UV) run --no-sync python bench/http_bench.py --repeat 3

clean:
	rm -rf .venv $(LOWEST_VENV) .mypy_cache .ruff_cache .pytest_cache
