# bench/bench.mk — `make bench`: the benchmark harness (bench/run.sh; see bench/RESULTS.md).
# Included from the Makefile. Not part of `make test` and never run by CI. About 4 minutes,
# 127.0.0.1 only; it installs wrk, nginx and strace with apt-get where they are missing.
# Knobs (environment): BENCH_DURATION, BENCH_SWEEP_DURATION, BENCH_WRK_THREADS, BENCH_VERIFY_BUDGET,
# BENCH_NICE (e.g. -10 on a shared machine), BENCH_WAIT_QUIET, BENCH_KEEP=1, BENCH_OUT=DIR,
# BENCH_TALLYD_FLAGS; see the head of bench/run.sh.
ifndef TALLY_BENCH_MK
TALLY_BENCH_MK := 1
BUILD ?= build

.PHONY: bench
bench: deps $(BUILD)/tallyd
	TALLYD=$(BUILD)/tallyd bench/run.sh

# `make bench-router`: the CPU a sharded node would spend routing one write (bench/router_cost.c;
# results in bench/RESULTS.md, "The router's CPU per write"). Seconds, single-threaded, no I/O.
.PHONY: bench-router
bench-router: $(BUILD)/router_cost
	$(BUILD)/router_cost

$(BUILD)/router_cost: $(call obj,rel,$(CORE_SRC) bench/router_cost.c)
	$(CC) $(CFLAGS) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)
endif
