#!/usr/bin/env bash
# run-tests.sh: build, install and run every stream_seq test suite: the
# model check, then pg_regress, isolation and TAP in throwaway clusters.
# Run as root on a fresh Debian bookworm machine, it installs the Debian packages it needs
# first and runs the suites as the "postgres" user (initdb refuses root).
# Run as another user, it says which packages are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

. test/packages.sh
need_packages postgresql-15 postgresql-server-dev-15 libipc-run-perl make gcc pgbouncer spin \
	postgresql-15-partman postgresql-15-repack postgresql-15-pglogical python3-psycopg

# the standby horizon protocol, model-checked (about 30 s)
test/check-model.sh

export PATH="/usr/lib/postgresql/15/bin:$PATH"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
make -s PG_CONFIG=$PG_CONFIG
if [ "$(id -u)" = 0 ]; then
	make -s PG_CONFIG=$PG_CONFIG install
	chown -R postgres "$PWD"
	runuser -u postgres -- make -s PG_CONFIG=$PG_CONFIG installcheck
else
	if [ ! -w "$($PG_CONFIG --pkglibdir)" ]; then
		echo "cannot install into $($PG_CONFIG --pkglibdir); run: sudo make install" >&2
		exit 1
	fi
	make -s PG_CONFIG=$PG_CONFIG install
	make -s PG_CONFIG=$PG_CONFIG installcheck
fi
