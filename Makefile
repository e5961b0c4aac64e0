# stream_seq: gap-safe stream tables for PostgreSQL

EXTENSION    = stream_seq
MODULE_big   = stream_seq
OBJS         = src/stream_seq.o src/shmem.o src/catalog.o src/counter.o \
               src/horizon.o src/assign.o src/lifecycle.o src/ddl.o \
               src/retention.o src/consumer.o src/wait.o src/status.o \
               src/compat.o
DATA         = $(wildcard sql/$(EXTENSION)--*.sql)
PGFILEDESC   = "stream_seq - gap-safe stream tables"

REGRESS        = $(basename $(notdir $(wildcard test/sql/*.sql)))
ISOLATION      = $(basename $(notdir $(wildcard test/specs/*.spec)))
REGRESS_OPTS   = --inputdir=test
ISOLATION_OPTS = --inputdir=test --outputdir=output_iso --load-extension=$(EXTENSION)
TAP_TESTS      = 1
PROVE_TESTS    = test/t/*.pl
ifndef TEST_EXISTING_SERVER
REGRESS_OPTS   += --temp-instance=./tmp_check --temp-config=test/$(EXTENSION).conf
ISOLATION_OPTS += --temp-instance=./tmp_check_iso --temp-config=test/$(EXTENSION).conf
endif

EXTRA_CLEAN = output_iso tmp_check tmp_check_iso

PG_CONFIG ?= pg_config
ifneq ($(wildcard /usr/lib/postgresql/15/bin/pg_config),)
PG_CONFIG = /usr/lib/postgresql/15/bin/pg_config
endif
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
# "make test" and "make demo" install the build dependencies themselves, so
# they must work before pg_config exists.
ifneq ($(PGXS),)
include $(PGXS)
endif

# Every object depends on the shared header (PGXS tracks no header
# dependencies unless the server was configured with --enable-depend).
$(OBJS): src/stream_seq.h

# Everything a user or CI runs: see README.md.
.PHONY: test demo bench check-valgrind
test:
	@test/run-tests.sh

demo:
	@bench/demo.sh

bench:
	@bench/bench.sh

# The regression and isolation suites against a server run under valgrind.
check-valgrind:
	@test/valgrind.sh
