# fuzz.mk — libFuzzer targets for tally's parsers of untrusted input; included by the Makefile.
#   make fuzz-build          build every target into build/fuzz/
#   make fuzz                build, then fuzz each target for FUZZ_SECONDS (default 60; -j2 runs two at once)
#   make fuzz-regress        run each target once over its committed corpus and fuzz/regressions/ (fast)
#   make fuzz FUZZ_TARGETS=fuzz_json FUZZ_SECONDS=600    one target, longer
#   make fuzz FUZZ_FLAGS='-fork=1 -ignore_crashes=1'      go on past a known crash (slower)
# Working corpora, logs and crashes: build/fuzz/{corpus,logs,crashes}/TARGET; fuzz/ is only read.

_fuzz_saved_goal := $(.DEFAULT_GOAL)

FUZZ_CC      ?= $(or $(CLANG),clang)
FUZZ_SECONDS ?= 60
FUZZ_DIR     := $(or $(BUILD),build)/fuzz
FUZZ_TARGETS ?= fuzz_parse fuzz_csv fuzz_ids fuzz_kinds fuzz_kindset fuzz_router fuzz_json fuzz_jwt fuzz_jwk fuzz_journalrec fuzz_forwarded fuzz_shardid fuzz_shardcursor
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c17 -D_GNU_SOURCE -DH2O_USE_LIBUV=0 -Isrc -Ifuzz -g -O1 -Wall -Wextra -Werror -MMD -MP $(FUZZ_SAN)
FUZZ_LIBS    := -ljansson -lssl -lcrypto -lz -pthread
# The code under test (pure: no store, no server, no threads).
FUZZ_LIB_SRC := src/core/parse.c src/core/csv.c src/core/ids.c src/core/kinds.c src/core/kindsjson.c src/core/textbuf.c src/core/b64url.c src/core/jwt.c src/core/jwk.c src/core/ratelimit.c src/core/journalrec.c src/core/netallow.c src/core/forwarded.c src/core/shardmap.c src/http/router.c
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_LIB_SRC))

.PHONY: fuzz fuzz-build fuzz-regress $(addprefix fuzz-run-,$(FUZZ_TARGETS))

fuzz-build: $(addprefix $(FUZZ_DIR)/,$(FUZZ_TARGETS))

# Library objects get coverage instrumentation but no fuzzer main; each target links its own main.
$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC [fuzz] $<"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(addprefix $(FUZZ_DIR)/,$(FUZZ_TARGETS)): $(FUZZ_DIR)/%: $(FUZZ_DIR)/obj/fuzz/%.o $(FUZZ_LIB_OBJ)
	@echo "  LD [fuzz] $@"
	@$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(FUZZ_LIBS)

# Each run is bounded by FUZZ_SECONDS and never fails the build by itself; `fuzz` fails at the end,
# after every target ran, when one of them crashed.
$(addprefix fuzz-run-,$(FUZZ_TARGETS)): fuzz-run-%: $(FUZZ_DIR)/%
	@FUZZ_DIR=$(FUZZ_DIR) fuzz/fuzz.sh run $* $(FUZZ_SECONDS)

fuzz: $(addprefix fuzz-run-,$(FUZZ_TARGETS))
	@FUZZ_DIR=$(FUZZ_DIR) fuzz/fuzz.sh summary $(FUZZ_TARGETS)

fuzz-regress: fuzz-build
	@FUZZ_DIR=$(FUZZ_DIR) fuzz/fuzz.sh regress $(FUZZ_TARGETS)

# Including this file must not change the Makefile's default goal.
.DEFAULT_GOAL := $(_fuzz_saved_goal)
