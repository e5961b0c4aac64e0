# stream_seq: gap-safe stream tables for PostgreSQL

EXTENSION    = stream_seq
MODULE_big   = stream_seq
OBJS         = src/startup.o src/settings.o src/shmem.o src/catalog.o src/counter.o \
               src/horizon.o src/xactstate.o src/capture.o src/commit.o src/guard.o \
               src/planner.o src/insertindexes.o \
               src/lifecycle.o src/ddl.o \
               src/retention.o src/consumer.o src/group.o src/resize.o src/wait.o \
               src/status.o src/compat.o src/replica.o \
               src/partition.o src/replication.o src/roles.o src/parking.o \
               src/retention_policy.o src/stats.o src/metrics.o \
               src/pagewrite.o src/upgrade.o
DATA         = $(wildcard sql/$(EXTENSION)--*.sql)
PGFILEDESC   = "stream_seq - gap-safe stream tables"
# the version of the library, for messages (the control file's)
EXT_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" stream_seq.control)
PG_CPPFLAGS  += -DSTREAM_SEQ_LIBRARY_VERSION='"$(EXT_VERSION)"'

# Regression suites (sql/NAME.sql, expected/NAME.out), in the order they
# run: upgrade drops and recreates the extension, so it comes last.
REGRESS        = enable writes applications write_path horizon consumers groups groups_resize commit_times typed_reads retries key_order key_order_edges \
                 lifecycle security ordinary_role partitions operations retention_policy metrics upgrade
# Isolation specs (test/specs/NAME.spec, expected/NAME.out).
ISOLATION      = $(basename $(notdir $(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test --outputdir=. --load-extension=$(EXTENSION)
TAP_TESTS      = 1
PROVE_TESTS    = test/t/*.pl
ifndef TEST_EXISTING_SERVER
REGRESS_OPTS   += --temp-instance=./tmp_check --temp-config=test/$(EXTENSION).conf
ISOLATION_OPTS += --temp-instance=./tmp_check_iso --temp-config=test/$(EXTENSION).conf
endif

EXTRA_CLEAN = .built-for tmp_check tmp_check_iso results log regression.diffs regression.out

# pg_config from the command line or the environment wins; otherwise the
# one of PostgreSQL 15 on Debian, otherwise the first one on PATH.
PG_CONFIG ?= $(firstword $(wildcard /usr/lib/postgresql/15/bin/pg_config) pg_config)
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
# after the include, which resets it: the TAP tests' shared helpers
PROVE_FLAGS += -I ./test/perl
else ifneq ($(filter-out test test-18 demo bench check-valgrind check-model,$(or $(MAKECMDGOALS),all)),)
# "make test", "make test-18", "make demo", "make bench",
# "make check-valgrind" and "make check-model" install the build dependencies themselves, so they
# work before pg_config exists.
$(error $(PG_CONFIG) not found: install postgresql-server-dev-15, or pass PG_CONFIG=/path/to/pg_config (make test installs what it needs))
endif

# Every object depends on every header of src/ (PGXS tracks no header
# dependencies unless the server was configured with --enable-depend),
# below.

# Objects are built for one server: .built-for names it, and is rewritten
# (so everything is rebuilt) only when PG_CONFIG names another one.
ifneq ($(PGXS),)
ifeq ($(filter clean distclean,$(MAKECMDGOALS)),)
BUILT_FOR := $(VERSION) $(PG_CONFIG)
ifneq ($(BUILT_FOR),$(shell cat .built-for 2>/dev/null))
$(shell echo '$(BUILT_FOR)' >.built-for 2>/dev/null)
endif
endif
endif
# the LLVM bitcode (servers built with JIT) is built for one server too
$(OBJS) $(OBJS:.o=.bc): .built-for $(wildcard src/*.h)

# Everything a user or CI runs: see README.md.
.PHONY: test test-18 demo bench check-valgrind check-model check-layers
test:
	@test/run-tests.sh

# The same suites against PostgreSQL 18, built from Debian's source package
# into a cache outside the clone the first time (test/build-pg.sh).
test-18:
	@test/run-tests.sh 18

# No file of src/ calls a file of a higher layer (src/README.md), and the
# calls between files form no circle: checked on the built objects (also
# in "make test").
check-layers: all
	@test/check-layers.pl src

# The standby horizon protocol, model-checked with spin (also in "make test").
check-model:
	@test/check-model.sh

demo:
	@bench/demo.sh

bench:
	@bench/bench.sh

# The regression and isolation suites against a server run under valgrind.
check-valgrind:
	@test/valgrind.sh
