# tally — build, run and test. `make run` and `make test` work on a fresh Debian 12 machine.

CC      ?= cc
CLANG   ?= clang
BUILD   := build
CFLAGS_COMMON := -std=c17 -D_GNU_SOURCE -DH2O_USE_LIBUV=0 -Isrc -I/usr/include/postgresql -Wall -Wextra -Werror -pthread -MMD -MP
CFLAGS  ?= -O2 -g
LDLIBS  := -lm -lh2o-evloop -llmdb -lz -lpq -ljansson -lcurl -lssl -lcrypto -lsystemd -lpthread
SAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# The Debian packages, named here only. `make deps` (and so `make run`) installs what building and
# running need; `make test-deps` (and so `make test` and CI) adds what only the tests and the tools
# need: a database server, sanitizer runtimes, a browser, the packaging tools. debian/control's
# Build-Depends are BUILD_PACKAGES (tests/package checks it).
BUILD_PACKAGES := build-essential pkg-config libh2o-evloop-dev liblmdb-dev libpq-dev libjansson-dev libssl-dev \
                  libcurl4-openssl-dev zlib1g-dev libsystemd-dev xxd
RUN_PACKAGES   := curl
PG_PACKAGES    := postgresql-15
# The failover stage's PostgreSQL under Patroni (tests/pg/patronicluster.py), with one etcd.
PATRONI_PACKAGES := patroni etcd-server
DEB_TOOLS      := debhelper dpkg-dev fakeroot
TEST_PACKAGES  := $(PG_PACKAGES) $(PATRONI_PACKAGES) $(DEB_TOOLS) python3 python3-jwt python3-cryptography clang clang-format \
                  libclang-rt-14-dev chromium chromium-driver lintian groff-base man-db systemd nginx

# Installs the missing ones of the packages $(1) (as root, from Debian's archive).
define apt_install
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

CORE_SRC   := $(wildcard src/core/*.c)
LIB_SRC    := $(CORE_SRC) $(wildcard src/store/*.c) $(wildcard src/store/*/*.c) $(wildcard src/engine/*.c)
HTTP_SRC   := $(wildcard src/http/*.c)
# The static files of /ui/ (URL path=file), embedded in tallyd at build time (scripts/embed_files.sh).
UI_FILES   := /ui/=ui/index.html /ui/admin=ui/admin.html /ui/demo.js=ui/demo.js /ui/admin.js=ui/admin.js \
              /ui/ui.css=ui/ui.css /ui/tally.js=clients/js/tally.js /ui/tally-reactions.js=clients/js/tally-reactions.js
UI_GEN     := $(BUILD)/gen/ui_files.c
# The version both programs report: the VERSION file, +g<commit> in a git checkout; make TALLY_VERSION=...
# overrides it. build/gen/version.c is rewritten only when it changes (so only it recompiles).
TALLY_VERSION ?= $(shell cat VERSION)$(shell git rev-parse --short=7 HEAD 2>/dev/null | sed 's/^/+g/')
VERSION_GEN := $(BUILD)/gen/version.c
TALLYD_SRC := $(LIB_SRC) $(HTTP_SRC) src/flags.c src/tallyd.c src/tallyd_flags.c src/tallyd_reload.c $(UI_GEN) $(VERSION_GEN)
TALLY_SRC  := $(LIB_SRC) src/flags.c src/tallyd_flags.c src/tally.c $(VERSION_GEN)
UNIT_SRC   := $(LIB_SRC) src/flags.c src/http/router.c src/http/openapi.c src/http/openapi_schemas.c $(UI_GEN) $(VERSION_GEN) $(wildcard tests/unit/*.c)

# make install: PREFIX (default /usr/local) and DESTDIR as usual. With PREFIX=/usr (a package) the
# configuration goes to /etc/tally and the unit to /lib/systemd/system, else under PREFIX.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
MANDIR     ?= $(PREFIX)/share/man
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
# The service's data directory (the unit's StateDirectory=tally), set in the installed configuration.
STATEDIR   ?= /var/lib/tally
# Man pages from man/*.in and each program's --help (scripts/gen_man.sh); the configuration file
# from tallyd's flag table (tallyd --print-config-template): the three cannot disagree.
MAN_PAGES  := $(BUILD)/man/tallyd.8 $(BUILD)/man/tally.1

obj = $(patsubst %.c,$(BUILD)/$(1)/%.o,$(2))

.PHONY: all deps test-deps pg-deps deb-deps npm-deps js-test run run-pg test unit e2e e2e-pg e2e-patroni format format-check clean install uninstall deb
all: $(BUILD)/tallyd $(BUILD)/tally $(MAN_PAGES)

deps:
	$(call apt_install,$(BUILD_PACKAGES) $(RUN_PACKAGES))

pg-deps:
	$(call apt_install,$(PG_PACKAGES))

deb-deps: deps
	$(call apt_install,$(DEB_TOOLS))

test-deps: deps
	$(call apt_install,$(TEST_PACKAGES))
	@$(MAKE) --no-print-directory npm-deps

# The JavaScript test tools (package.json, exact versions in package-lock.json): the OpenAPI
# validator, ajv, playwright-core (driving Debian's /usr/bin/chromium; it never downloads a browser).
# Node 20 and npm come with the machine; where there is no npm at all, Debian's are installed.
npm-deps: node_modules/.package-lock.json
node_modules/.package-lock.json: package.json package-lock.json
	@command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund
	@touch $@

$(VERSION_GEN): FORCE
	@mkdir -p $(dir $@)
	@printf '/* generated by the Makefile from VERSION */\n#include "version.h"\nconst char tally_version[] = "%s";\n' \
	  '$(TALLY_VERSION)' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
.PHONY: FORCE
FORCE:

$(UI_GEN): scripts/embed_files.sh $(foreach f,$(UI_FILES),$(lastword $(subst =, ,$(f))))
	@mkdir -p $(dir $@)
	@echo "  EMBED $(words $(UI_FILES)) files"
	@scripts/embed_files.sh $@ $(UI_FILES)

$(BUILD)/rel/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC $<"
	@$(CC) $(CPPFLAGS) $(CFLAGS_COMMON) $(CFLAGS) -c $< -o $@

$(BUILD)/san/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC [san] $<"
	@$(CC) $(CFLAGS_COMMON) $(SAN_FLAGS) -c $< -o $@

$(BUILD)/tallyd: $(call obj,rel,$(TALLYD_SRC))
	$(CC) $(CFLAGS) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

$(BUILD)/tally: $(call obj,rel,$(TALLY_SRC))
	$(CC) $(CFLAGS) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

$(BUILD)/man/tallyd.8: man/tallyd.8.in scripts/gen_man.sh $(BUILD)/tallyd
	@mkdir -p $(dir $@)
	@echo "  MAN $@"
	@scripts/gen_man.sh $(BUILD)/tallyd $< $@

$(BUILD)/man/tally.1: man/tally.1.in scripts/gen_man.sh $(BUILD)/tally
	@mkdir -p $(dir $@)
	@echo "  MAN $@"
	@scripts/gen_man.sh $(BUILD)/tally $< $@

# The unit and the configuration file are written at install time, for the PREFIX given then. An
# existing configuration file is kept (the new one is written beside it as tallyd.conf.new).
install: all
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man1 \
	  $(DESTDIR)$(SYSCONFDIR)/tally $(DESTDIR)$(UNITDIR)
	install -m 755 $(BUILD)/tallyd $(DESTDIR)$(SBINDIR)/tallyd
	install -m 755 $(BUILD)/tally $(DESTDIR)$(BINDIR)/tally
	install -m 644 $(BUILD)/man/tallyd.8 $(DESTDIR)$(MANDIR)/man8/tallyd.8
	install -m 644 $(BUILD)/man/tally.1 $(DESTDIR)$(MANDIR)/man1/tally.1
	sed -e 's|/usr/sbin/tallyd|$(SBINDIR)/tallyd|' -e 's|/etc/tally/|$(SYSCONFDIR)/tally/|g' dist/tallyd.service \
	  > $(BUILD)/tallyd.service
	install -m 644 $(BUILD)/tallyd.service $(DESTDIR)$(UNITDIR)/tallyd.service
	$(BUILD)/tallyd --print-config-template --data $(STATEDIR) > $(BUILD)/tallyd.conf
	@conf=$(DESTDIR)$(SYSCONFDIR)/tally/tallyd.conf; \
	if [ -e $$conf ] && ! cmp -s $(BUILD)/tallyd.conf $$conf; then \
	  install -m 644 $(BUILD)/tallyd.conf $$conf.new; echo "kept $$conf; the new one is $$conf.new"; \
	else install -m 644 $(BUILD)/tallyd.conf $$conf; echo "installed $$conf"; fi

# The Debian package, build/tally_<version>_<arch>.deb, built by dpkg-buildpackage from a copy of
# the tree in build/pkg/tally-<version>/ (its results go to the copy's parent, and its clean step
# runs make clean there, never here). debian/changelog's version must be VERSION's.
deb: deb-deps
	@v=$$(dpkg-parsechangelog -S Version) && [ "$$v" = "$$(cat VERSION)" ] || \
	  { echo "debian/changelog's version $$v is not VERSION's $$(cat VERSION)"; exit 1; }
	@v=$$(cat VERSION); src=$(BUILD)/pkg/tally-$$v; rm -rf $(BUILD)/pkg && mkdir -p $$src && \
	if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git ls-files -z --cached --others --exclude-standard | xargs -0 cp -P --parents -t $$src; \
	else tar --exclude=./$(BUILD) --exclude=./node_modules --exclude=./data -cf - . | tar -xf - -C $$src; fi
	cd $(BUILD)/pkg/tally-$$(cat VERSION) && dpkg-buildpackage -us -uc -b
	cp $(BUILD)/pkg/tally_$$(cat VERSION)_*.deb $(BUILD)/
	@ls $(BUILD)/tally_$$(cat VERSION)_*.deb

# Leaves the configuration file (and any data) in place.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/tallyd $(DESTDIR)$(BINDIR)/tally $(DESTDIR)$(MANDIR)/man8/tallyd.8 \
	  $(DESTDIR)$(MANDIR)/man1/tally.1 $(DESTDIR)$(UNITDIR)/tallyd.service

$(BUILD)/san/tallyd: $(call obj,san,$(TALLYD_SRC))
	$(CC) $(SAN_FLAGS) -pthread -o $@ $^ $(LDLIBS)

$(BUILD)/corrupt_count: $(call obj,rel,$(LIB_SRC) tests/tools/corrupt_count.c)
	$(CC) $(CFLAGS) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

# Test-only: opens stores as the shards of one cluster (their identities), as a sharded node will.
$(BUILD)/shards_open: $(call obj,rel,$(LIB_SRC) tests/tools/shards_open.c)
	$(CC) $(CFLAGS) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

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
run-pg: deps pg-deps all
	scripts/run_pg.sh

# The whole suite: unit tests (sanitized), end-to-end against the release build and the sanitized
# one, and against the release build on PostgreSQL (tests/run_all.sh).
test: test-deps all $(BUILD)/san/tallyd $(BUILD)/san/unit_tests $(BUILD)/corrupt_count $(BUILD)/shards_open $(BUILD)/syncorder.so $(BUILD)/hold_env fuzz-build
	@tests/run_all.sh

# The JavaScript tests alone: OpenAPI (redocly lint, ajv), the client, the pages in headless Chromium.
js-test: test-deps all
	tests/js/run.sh

unit: $(BUILD)/san/unit_tests
	$(BUILD)/san/unit_tests

e2e: all
	python3 tests/e2e/run_e2e.py

# The end-to-end suite on the PostgreSQL store (its own throwaway cluster; needs postgresql-15).
e2e-pg: all
	TALLY_STORE=pg python3 tests/e2e/run_e2e.py

# The failover under Patroni alone (etcd and two PostgreSQL servers under patroni; ~1 minute).
e2e-patroni: all
	TALLY_PATRONI=1 python3 tests/e2e/run_e2e.py -k test_patroni

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD)

include fuzz/fuzz.mk
-include bench/bench.mk

# (not the package's copy in $(BUILD)/pkg/, whose etc/logrotate.d is a directory)
-include $(shell find $(BUILD) -path $(BUILD)/pkg -prune -o -name '*.d' -type f -print 2>/dev/null)
