# packages.sh: need_packages PKG..., sourced by the scripts that make test,
# make demo, make bench and make check-valgrind run.  Installs the Debian
# packages that are missing when run as root; otherwise prints the apt-get
# command to run and exits 1.

need_packages() {
	local missing="" p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	if [ "$(id -u)" = 0 ]; then
		echo "== installing Debian packages:$missing"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q >/dev/null
		# shellcheck disable=SC2086
		apt-get install -y -q $missing >/dev/null
	else
		echo "missing Debian packages:$missing" >&2
		echo "run: sudo apt-get install -y$missing" >&2
		exit 1
	fi
}
