#!/usr/bin/env bash
# build-pg.sh MAJOR: build a PostgreSQL server of that major version from
# Debian's source package, with the tools the test suites need, into a cache
# directory outside the clone, and print the path of its pg_config.
#
# Used by "make test-18" for versions Debian bookworm does not package.  The
# source comes from the same Debian archive as the machine's packages, read
# through an apt configuration of its own (nothing is added to the machine's
# apt sources): suite sid by default, STREAM_SEQ_PG_SUITE to change it.
# A build is reused while the source versions and the build's options are
# unchanged, so only a fresh machine pays for it (about 6 minutes on 2
# cores).
#
# Also built into the same installation, because Debian packages them for
# 15 only: the isolation tester, the TAP modules, and the three extensions
# the TAP tests use beside stream_seq (pg_partman, pg_repack, pglogical),
# from the same suite's source packages.
#
# Cache: STREAM_SEQ_PG_CACHE, else /var/cache/stream_seq when run as root,
# else ~/.cache/stream_seq.  STREAM_SEQ_PG_CASSERT=1 builds a server with
# assertions (--enable-cassert) beside the plain one, for a run of the
# suites that checks the server's assertions too; it is slower, so neither
# "make test-18" nor "make bench" uses it unless asked.  Needs bison, flex,
# gcc, make, zlib1g-dev, libxml2-dev and libipc-run-perl; run as root, it
# installs them.
set -euo pipefail
cd "$(dirname "$0")/.."

MAJOR=${1:?usage: build-pg.sh MAJOR}
SUITE=${STREAM_SEQ_PG_SUITE:-sid}
EXTENSIONS="pg-partman pg-repack pglogical"
# the contrib modules the tests use: amcheck checks indexes against the
# heap after the commit-time writes, pageinspect shows row versions,
# pg_stat_statements must see only the user's statements, pg_walinspect
# counts the commit-time write's WAL records, test_decoding decodes it
CONTRIB="amcheck pageinspect pg_stat_statements pg_walinspect test_decoding"
if [ "$(id -u)" = 0 ]; then
	CACHE=${STREAM_SEQ_PG_CACHE:-/var/cache/stream_seq}
else
	CACHE=${STREAM_SEQ_PG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stream_seq}
fi
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

# stdout carries only the path of pg_config: everything else to stderr
. test/packages.sh
need_packages bison flex gcc make zlib1g-dev libxml2-dev libipc-run-perl >&2

# one build at a time per cache (two clones, or make bench beside make test)
exec 9>"$CACHE/lock"
flock 9

log() { echo "== build-pg $MAJOR: $*" >&2; }

# A private apt configuration: deb-src lines of $SUITE, lists kept in the
# cache.  Debian's archive keyring signs them, like the machine's entries.
APT=$CACHE/apt
mkdir -p "$APT/lists/partial" "$APT/archives/partial"
cat >"$APT/sources.list" <<EOF
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $SUITE main
EOF
apt_opts=(-o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$APT/lists" -o "Dir::Cache::Archives=$APT/archives"
	-o APT::Sandbox::User=root -q)

# source_version PACKAGE: the newest version of a source package in $SUITE
source_version() {
	apt-cache "${apt_opts[@]}" showsrc "$1" 2>/dev/null |
		awk '/^Version:/ {print $2}' | sort -V | tail -1
}

# Refresh the lists at most once a day; offline, use what is there.
if [ -z "$(find "$APT/lists" -maxdepth 1 -name '*Sources*' -mtime -1 2>/dev/null)" ]; then
	log "reading $SUITE's source lists"
	apt-get "${apt_opts[@]}" update >&2 ||
		log "apt-get update failed; using the lists already there"
fi
PG_VERSION=$(source_version "postgresql-$MAJOR")
if [ -z "$PG_VERSION" ]; then
	echo "build-pg.sh: no source package postgresql-$MAJOR in Debian $SUITE" >&2
	exit 1
fi

# The stamp names every input: a change in any of them means a new build.
# LAYOUT counts changes to what is built and installed below: raise it
# with such a change.
LAYOUT=2
PREFIX=$CACHE/pg-$MAJOR
# libxml: query_to_xml(), which doc/examples/prometheus/queries.yaml uses
# (as Debian's and the other distributions' servers have it)
configure_opts=(--without-icu --without-readline --with-libxml --enable-tap-tests --enable-debug)
if [ "${STREAM_SEQ_PG_CASSERT:-0}" = 1 ]; then
	PREFIX=$CACHE/pg-$MAJOR-cassert
	configure_opts+=(--enable-cassert)
fi
stamp="postgresql-$MAJOR $PG_VERSION"
declare -A VERSION_OF
for p in $EXTENSIONS; do
	VERSION_OF[$p]=$(source_version "$p")
	if [ -z "${VERSION_OF[$p]}" ]; then
		echo "build-pg.sh: no source package $p in Debian $SUITE" >&2
		exit 1
	fi
	stamp="$stamp, $p ${VERSION_OF[$p]}"
done
stamp="$stamp, contrib $CONTRIB, layout $LAYOUT, configure ${configure_opts[*]}"
if [ -f "$PREFIX/.stamp" ] && [ "$(cat "$PREFIX/.stamp")" = "$stamp" ]; then
	log "reusing $PREFIX ($stamp)"
	echo "$PREFIX/bin/pg_config"
	exit 0
fi

# Run from "make test-18", this script inherits the outer make's
# MAKELEVEL and MAKEFLAGS; PostgreSQL's makefiles generate their headers
# only at MAKELEVEL 0, and a parallel build without them fails
# ("utils/errcodes.h: No such file or directory").
unset MAKELEVEL MAKEFLAGS MFLAGS MAKEFILES

started=$(date +%s)
WORK=$PREFIX.build
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# fetch PACKAGE VERSION: the upstream tarball of a source package, unpacked
# into ./PACKAGE (Debian's own patches are packaging, not needed here)
fetch() {
	local pkg=$1 version=$2 upstream tarball
	upstream=${version#*:}
	upstream=${upstream%-*}
	apt-get "${apt_opts[@]}" source --download-only --tar-only "$pkg=$version" >/dev/null
	tarball=$(ls "${pkg}_${upstream}".orig.tar.*)
	mkdir "$pkg"
	tar -xf "$tarball" -C "$pkg" --strip-components=1
}

# every source first: a failed download leaves the cached build as it was
log "fetching postgresql-$MAJOR $PG_VERSION and $EXTENSIONS"
fetch "postgresql-$MAJOR" "$PG_VERSION"
for p in $EXTENSIONS; do
	fetch "$p" "${VERSION_OF[$p]}"
done
rm -rf "$PREFIX"
cd "postgresql-$MAJOR"
log "configuring"
./configure --prefix="$PREFIX" "${configure_opts[@]}" >"$WORK/configure.log" 2>&1 ||
	{ tail -30 "$WORK/configure.log" >&2; exit 1; }
log "building (make -j$(nproc))"
make -s -j"$(nproc)" >"$WORK/make.log" 2>&1 || { tail -30 "$WORK/make.log" >&2; exit 1; }
make -s install >/dev/null
# not installed by "make install": the isolation tester
make -s -C src/test/isolation install >/dev/null
make -s -C src/test/perl install >/dev/null
for m in $CONTRIB; do
	make -s -C "contrib/$m" install >/dev/null
done
cd "$WORK"

export PATH="$PREFIX/bin:$PATH"
for p in $EXTENSIONS; do
	log "building $p ${VERSION_OF[$p]}"
	make -s -C "$p" -j"$(nproc)" PG_CONFIG="$PREFIX/bin/pg_config" >"$WORK/$p.log" 2>&1 ||
		{ tail -30 "$WORK/$p.log" >&2; exit 1; }
	make -s -C "$p" PG_CONFIG="$PREFIX/bin/pg_config" install >/dev/null
done

echo "$stamp" >"$PREFIX/.stamp"
log "built $PREFIX in $(($(date +%s) - started)) s ($stamp)"
echo "$PREFIX/bin/pg_config"
