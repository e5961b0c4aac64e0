#!/usr/bin/env bash
# run-tests.sh [MAJOR]: build, install and run every stream_seq test suite
# against PostgreSQL MAJOR (default 15): the model check, the build and
# the check of the layers of src/, then pg_regress, isolation and TAP in
# throwaway clusters.  "make test" runs it for 15,
# "make test-18" for 18.
#
# 15 comes from Debian's packages.  Another major version is built from
# Debian's source package by test/build-pg.sh into a cache outside the
# clone (the first run on a machine takes about 5 minutes longer); 15 is
# installed beside it, with stream_seq, for the upgrade test from 15
# (test/t/029_major_upgrade.pl).
#
# Run as root on a fresh Debian bookworm machine, it installs the Debian
# packages it needs first and runs the suites as the "postgres" user
# (initdb refuses root).  Run as another user, it says which packages are
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
MAJOR=${1:-15}

. test/packages.sh
need_packages postgresql-15 postgresql-server-dev-15 libipc-run-perl make gcc pgbouncer spin \
	postgresql-15-partman postgresql-15-repack postgresql-15-pglogical postgresql-15-wal2json python3-psycopg \
	prometheus-postgres-exporter
# the Python library's install, as its README says (test/t/043_python_library.pl)
need_packages python3-venv python3-setuptools python3-wheel python3-build
# the exporter's Debian service is not wanted: test/t/040_metrics_exporter.pl
# runs exporters of its own on free ports
if [ "$(id -u)" = 0 ]; then
	systemctl disable --now prometheus-postgres-exporter >/dev/null 2>&1 ||
		service prometheus-postgres-exporter stop >/dev/null 2>&1 || true
fi
# the libraries of the applications test (test/t/039_applications.pl); its
# npm packages it installs itself, into /var/cache/stream_seq/npm (pgx,
# Go, it runs only where golang-go and golang-github-jackc-pgx-v4-dev are)
need_packages python3-sqlalchemy python3-django python3-psycopg2 python3-asyncpg \
	default-jdk-headless libpostgresql-jdbc-java libhibernate3-java libjavassist-java \
	ruby-activerecord ruby-pg nodejs
# npm comes with nodejs where nodejs is not Debian's
command -v npm >/dev/null || need_packages npm

# the standby horizon protocol, model-checked (about 30 s)
test/check-model.sh

PG15_CONFIG=/usr/lib/postgresql/15/bin/pg_config
if [ "$MAJOR" = 15 ]; then
	PG_CONFIG=${PG_CONFIG:-$PG15_CONFIG}
	unset STREAM_SEQ_OLD_PG_CONFIG
else
	PG_CONFIG=$(test/build-pg.sh "$MAJOR")
	# the upgrade test's old server: 15, with stream_seq built for it
	export STREAM_SEQ_OLD_PG_CONFIG=$PG15_CONFIG
fi
BINDIR=$($PG_CONFIG --bindir)
export PATH="$BINDIR:$PATH"
echo "== stream_seq against $($PG_CONFIG --version) ($PG_CONFIG)"

# install_for PG_CONFIG: build and install for that server (the Makefile
# rebuilds the objects when the server changes); without the right to
# write there, only check that what is installed is this build
install_for() {
	make -s PG_CONFIG="$1"
	if [ "$(id -u)" != 0 ] && [ ! -w "$($1 --pkglibdir)" ]; then
		if ! cmp -s stream_seq.so "$($1 --pkglibdir)/stream_seq.so"; then
			echo "cannot install into $($1 --pkglibdir); run: sudo make install PG_CONFIG=$1" >&2
			exit 1
		fi
		return 0
	fi
	make -s PG_CONFIG="$1" install
}

if [ -n "${STREAM_SEQ_OLD_PG_CONFIG:-}" ]; then
	install_for "$STREAM_SEQ_OLD_PG_CONFIG"
fi
install_for "$PG_CONFIG"
# no file of src/ calls a file of a higher layer (src/README.md), on the
# objects just built
test/check-layers.pl src
if [ "$(id -u)" = 0 ]; then
	chown -R postgres "$PWD"
	install -d -o postgres /var/cache/stream_seq/npm /var/cache/stream_seq/go-build
	runuser -u postgres -- env PATH="$PATH" make -s PG_CONFIG="$PG_CONFIG" installcheck
else
	make -s PG_CONFIG="$PG_CONFIG" installcheck
fi
