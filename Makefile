# tally — build, run and test. `make run` and `make test` work on a fresh Debian 12 machine.

CC      ?= cc
CLANG   ?= clang
BUILD   := build
CFLAGS_COMMON := -std=c17 -D_GNU_SOURCE -DH2O_USE_LIBUV=0 -Isrc -I/usr/include/postgresql -Wall -Wextra -Werror -pthread -MMD -MP
CFLAGS  ?= -O2 -g
LDLIBS  := -lm -lh2o-evloop -llmdb -lz -lpq -ljansson -lcurl -lssl -lcrypto -lpthread
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# Debian packages the build, the tests and the tools need (one place; `make deps` installs what is missing).
DEB_PACKAGES := build-essential pkg-config libh2o-evloop-dev liblmdb-dev libpq-dev postgresql-15 libjansson-dev libssl-dev libcurl4-openssl-dev zlib1g-dev \
                python3 python3-jwt python3-cryptography clang clang-format libclang-rt-14-dev curl xxd chromium chromium-driver

CORE_SRC   := $(wildcard src/core/*.c)
LIB_SRC    := $(CORE_SRC) $(wildcard src/store/*.c) $(wildcard src/store/*/*.c) $(wildcard src/engine/*.c)
HTTP_SRC   := $(wildcard src/http/*.c)
# The static files of /ui/ (URL path=file), embedded in tallyd at build time (scripts/embed_files.sh).
UI_FILES   := /ui/=ui/index.html /ui/admin=ui/admin.html /ui/demo.js=ui/demo.js /ui/admin.js=ui/admin.js \
              /ui/ui.css=ui/ui.css /ui/tally.js=clients/js/tally.js /ui/tally-reactions.js=clients/js/tally-reactions.js
UI_GEN     := $(BUILD)/gen/ui_files.c
TALLYD_SRC := $(LIB_SRC) $(HTTP_SRC) src/tallyd.c $(UI_GEN)
TALLY_SRC  := $(LIB_SRC) src/tally.c
UNIT_SRC   := $(LIB_SRC) src/http/router.c src/http/openapi.c src/http/openapi_schemas.c $(UI_GEN) $(wildcard tests/unit/*.c)

obj = $(patsubst %.c,$(BUILD)/$(1)/%.o,$(2))

.PHONY: all deps npm-deps js-test run run-pg test unit e2e e2e-pg format format-check clean
all: $(BUILD)/tallyd $(BUILD)/tally

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@$(MAKE) --no-print-directory npm-deps

# The JavaScript test tools (package.json, exact versions in package-lock.json): the OpenAPI
# validator, ajv, playwright-core (driving Debian's /usr/bin/chromium; it never downloads a browser).
# Node 20 and npm come with the machine; where there is no npm at all, Debian's are installed.
npm-deps: node_modules/.package-lock.json
node_modules/.package-lock.json: package.json package-lock.json
	@command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
	@touch $@

$(UI_GEN): scripts/embed_files.sh $(foreach f,$(UI_FILES),$(lastword $(subst =, ,$(f))))
	@mkdir -p $(dir $@)
	@echo "  EMBED $(words $(UI_FILES)) files"
	@scripts/embed_files.sh $@ $(UI_FILES)

$(BUILD)/rel/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC $<"
	@$(CC) $(CFLAGS_COMMON) $(CFLAGS) -c $< -o $@

$(BUILD)/san/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC [san] $<"
	@$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) -c $< -o $@

$(BUILD)/tallyd: $(call obj,rel,$(TALLYD_SRC))
	$(CC) $(CFLAGS) -pthread -o $@ $^ $(LDLIBS)

$(BUILD)/tally: $(call obj,rel,$(TALLY_SRC))
	$(CC) $(CFLAGS) -pthread -o $@ $^ $(LDLIBS)

$(BUILD)/san/tallyd: $(call obj,san,$(TALLYD_SRC))
	$(CC) $(SAN_FLAGS) -pthread -o $@ $^ $(LDLIBS)

$(BUILD)/corrupt_count: $(call obj,rel,$(LIB_SRC) tests/tools/corrupt_count.c)
	$(CC) $(CFLAGS) -pthread -o $@ $^ $(LDLIBS)

# Test-only: keeps a store's LMDB environment open, as a tool beside tallyd does.
$(BUILD)/hold_env: tests/tools/hold_env.c
	@mkdir -p $(BUILD)
	$(CC) -std=c17 -O2 -Wall -Wextra -Werror -o $@ $< -llmdb

# Test-only: an LD_PRELOAD shim that records the order of syncs and socket writes.
$(BUILD)/syncorder.so: tests/tools/syncorder.c
	$(CC) -std=c17 -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl

$(BUILD)/san/unit_tests: $(call obj,san,$(UNIT_SRC))
	$(CC) $(SAN_FLAGS) -pthread -o $@ $^ $(LDLIBS)

run: deps all
	$(BUILD)/tallyd --listen 127.0.0.1:8080 --data ./data

# A throwaway local PostgreSQL and two tallyd nodes on it (8081, 8082); Ctrl-C stops everything.
run-pg: deps all
	scripts/run_pg.sh

# The whole suite: unit tests (sanitized), end-to-end against the release build and the sanitized
# one, and against the release build on PostgreSQL (tests/run_all.sh).
test: deps all $(BUILD)/san/tallyd $(BUILD)/san/unit_tests $(BUILD)/corrupt_count $(BUILD)/syncorder.so $(BUILD)/hold_env fuzz-build
	@tests/run_all.sh

# The JavaScript tests alone: OpenAPI (redocly lint, ajv), the client, the pages in headless Chromium.
js-test: npm-deps all
	tests/js/run.sh

unit: $(BUILD)/san/unit_tests
	$(BUILD)/san/unit_tests

e2e: all
	python3 tests/e2e/run_e2e.py

# The end-to-end suite on the PostgreSQL store (its own throwaway cluster; needs postgresql-15).
e2e-pg: all
	TALLY_STORE=pg python3 tests/e2e/run_e2e.py

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD)

include fuzz/fuzz.mk
-include bench/bench.mk

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
