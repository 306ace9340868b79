#!/usr/bin/env bash
# Provisions a private llama-server for a Debian machine that has no
# llama.cpp package (bookworm): downloads llama.cpp-tools and the runtime
# libraries it needs from Debian's unstable suite, unpacks them into the
# cache directory without touching the system, and writes a wrapper that
# starts llama-server through that directory's own dynamic loader.
#
#   deploy/provision-llama-server.sh           provision if not done yet
#   deploy/provision-llama-server.sh --force   provision again (newest sid)
#
# A wrapper written by an older version of this script is written again
# over the packages already unpacked, without downloading them again.
#
# Result: $CACHE/llama.cpp/bin/llama-server, with the package versions in
# $CACHE/llama.cpp/VERSIONS. CACHE is $SLUICE_CACHE_DIR, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/sluice. The mirror is $SLUICE_DEBIAN_MIRROR,
# else the one in the system's own apt configuration. SLUICE_APT_OPTIONS adds
# apt options. When the mirror's sid Release file has expired (a snapshot
# mirror) and that is apt's only error, the update is retried without the
# date check; signatures are still verified.
set -euo pipefail

say() { printf 'provision: %s\n' "$*"; }
die() { printf 'provision: error: %s\n' "$*" >&2; exit 1; }

cache="${SLUICE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
dest="$cache/llama.cpp"
wrapper="$dest/bin/llama-server"

force=""
[ "${1:-}" != "--force" ] || force=1

# Is the wrapper this script writes now there, and does it run? One from
# before the web UI line or the process name (both below) is not.
current() {
	[ -x "$wrapper" ] && grep -q LLAMA_ARG_STATIC_PATH "$wrapper" &&
		grep -q -- '--argv0' "$wrapper" &&
		"$wrapper" --version >/dev/null 2>&1
}

if [ -z "$force" ] && current; then
	say "already provisioned: $wrapper"
	exit 0
fi

command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
	die "needs apt-get and dpkg (Debian or a derivative)"

case "$(dpkg --print-architecture)" in
amd64) triplet=x86_64-linux-gnu loader=ld-linux-x86-64.so.2 ;;
arm64) triplet=aarch64-linux-gnu loader=ld-linux-aarch64.so.1 ;;
*) die "no recipe for the $(dpkg --print-architecture) architecture" ;;
esac

# Writes $wrapper for the packages unpacked in $dest/prefix.
#
# The wrapper runs llama-server through the prefix's loader, and the kernel
# names a process after the file it was started from: started as the
# loader, llama-server would show as ld-linux-x86-64 in ps, pgrep and
# ss -p. So the wrapper starts the loader through a link named
# llama-server (prefix/libexec/llama-server), and the loader gives
# llama-server that name as its argv[0] too (--argv0).
write_wrapper() {
	local prefix="$dest/prefix" ui
	mkdir -p "$dest/bin" "$prefix/libexec"
	ln -sfn "../usr/lib/$triplet/$loader" "$prefix/libexec/llama-server"
	# Debian's llama-server serves the web UI its package installs under
	# /usr/share; unpacked privately, it is told where that is. It serves
	# it only while its UI is on (sluice --ui on).
	ui=$(find "$prefix/usr/share/llama.cpp" -name index.html -printf '%h\n' 2>/dev/null | head -n 1)
	cat >"$wrapper.new" <<WRAPPER
#!/bin/sh
# Written by sluice's deploy/provision-llama-server.sh: runs Debian sid's
# llama-server with its own C library and loader, leaving the system alone.
# The loader is started through a link named llama-server, so that the
# process shows by that name in ps and pgrep.
p='$prefix/usr/lib/$triplet'
# The web UI's files, unless the caller names others (LLAMA_ARG_STATIC_PATH
# is llama-server's --path).
[ -n "\${LLAMA_ARG_STATIC_PATH:-}" ] || [ -z '$ui' ] || export LLAMA_ARG_STATIC_PATH='$ui'
exec '$prefix/libexec/llama-server' --argv0 llama-server --library-path "\$p:\$p/llama" '$prefix/usr/bin/llama-server' "\$@"
WRAPPER
	chmod +x "$wrapper.new"
	mv "$wrapper.new" "$wrapper"
}

# An older wrapper over packages still there: only the wrapper is new.
if [ -z "$force" ] && [ -e "$wrapper" ] &&
	[ -x "$dest/prefix/usr/lib/$triplet/$loader" ] &&
	[ -e "$dest/prefix/usr/bin/llama-server" ]; then
	write_wrapper
	if current; then
		say "wrote a new wrapper for the packages already in $dest/prefix: $wrapper"
		exit 0
	fi
	say "the packages in $dest/prefix do not run: provisioning them again"
fi

# The Debian mirror: $SLUICE_DEBIAN_MIRROR, else the system's own, the first
# URI whose suites include this release's codename, from deb822 .sources
# files or the classic list.
mirror="${SLUICE_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
	codename=$( . /etc/os-release && echo "${VERSION_CODENAME:-}")
	[ -n "$codename" ] || die "cannot tell the Debian release from /etc/os-release"
	mirror=$(
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			awk -v want="$codename" '
				/^[[:space:]]*$/ { if (uri && ok) { print uri; exit } uri=""; ok=0; next }
				tolower($1) == "uris:" { uri=$2 }
				tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == want) ok=1 }
				END { if (uri && ok) print uri }' "$f"
		done
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			awk -v want="$codename" '
				$1 == "deb" { u=2; if ($2 ~ /^\[/) { while ($u !~ /\]$/) u++; u++ }
				              if ($(u+1) == want) print $u }' "$f"
		done
	)
	mirror=$(printf '%s\n' "$mirror" | grep -v -- '-security' | head -n 1)
	[ -n "$mirror" ] || die "found no Debian mirror for '$codename' in /etc/apt"
fi

packages=(llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1
	libgomp1 libssl3t64 libzstd1 zlib1g openssl-provider-legacy
	libc-gconv-modules-extra)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb $mirror sid main" >"$work/sources.list"
apt_opts=(
	-o "Dir::Etc::SourceList=$work/sources.list"
	-o "Dir::Etc::SourceParts=/dev/null"
	-o "Dir::State::Lists=$work/lists"
	-o "Dir::Cache=$work/cache"
	-o "APT::Architecture=$(dpkg --print-architecture)"
	-o "Debug::NoLocking=1"
)
# As root, apt drops to the _apt user, who cannot write our directories.
[ "$(id -u)" -ne 0 ] || apt_opts+=(-o "APT::Sandbox::User=root")
# shellcheck disable=SC2206 # word splitting of the options is intended
apt_opts+=(${SLUICE_APT_OPTIONS:-})

# apt's own wording (apt 2.x, acquire-item.cc) for a Release file past its
# Valid-Until date. It is only ever printed after the signature has been
# checked, so retrying without the date check still verifies signatures.
expired='^E: Release file for .* is expired \(invalid since .*\)\. Updates for this repository will not be applied\.$'

# Runs apt-get update into $work/update.log; fails when apt does or when it
# reports any error.
update() {
	apt-get -q "${apt_opts[@]}" update >"$work/update.log" 2>&1 &&
		! grep -q '^E: ' "$work/update.log"
}

# The errors of the last update on one line, or its last lines when it
# named none.
update_errors() {
	local lines
	lines=$(grep '^E: ' "$work/update.log" | head -n 3) ||
		lines=$(tail -n 3 "$work/update.log")
	printf '%s\n' "$lines" | paste -s -d ' '
}

say "fetching the package list of Debian unstable (sid) from $mirror"
if ! update; then
	# A snapshot mirror serves Release files whose Valid-Until date has
	# passed. When that is apt's only complaint, take the lists anyway.
	if grep -q '^E: ' "$work/update.log" &&
		! grep '^E: ' "$work/update.log" | grep -qvE "$expired"; then
		say "the mirror's sid Release file has expired (a snapshot mirror?): retrying with Acquire::Check-Valid-Until=false (signatures are still checked)"
		apt_opts+=(-o "Acquire::Check-Valid-Until=false")
		update || die "apt-get update of sid failed: $(update_errors)"
	else
		die "apt-get update of sid failed: $(update_errors)"
	fi
fi
say "downloading ${packages[*]}"
(cd "$work/debs" && apt-get -q "${apt_opts[@]}" download "${packages[@]}") \
	>"$work/download.log" 2>&1 ||
	die "download failed: $(tail -n 3 "$work/download.log")"

prefix="$dest/prefix.new"
rm -rf "$prefix"
mkdir -p "$prefix"
for deb in "$work"/debs/*.deb; do
	dpkg -x "$deb" "$prefix"
done
libdir="$prefix/usr/lib/$triplet"
# ggml picks the best CPU backend for this machine from beside the loader.
for so in "$libdir"/ggml/backends0/libggml-cpu-*.so; do
	[ -e "$so" ] && ln -sf "ggml/backends0/$(basename "$so")" "$libdir/"
done

# The sid dependency list moves: say exactly which library is missing.
libpath="$libdir:$libdir/llama"
for bin in "$prefix/usr/bin/llama-server" "$libdir"/llama/libllama-server-impl.so; do
	[ -e "$bin" ] || continue
	missing=$("$libdir/$loader" --library-path "$libpath" --list "$bin" |
		awk '/not found/ { print $1 }' | sort -u | tr '\n' ' ')
	if [ -n "$missing" ]; then
		die "$(basename "$bin") needs libraries that none of the packages provide: $missing(look them up with: apt-cache ${apt_opts[*]} search LIBNAME)"
	fi
done

# Swap the new prefix in and write the wrapper.
rm -rf "$dest/prefix"
mv "$prefix" "$dest/prefix"
write_wrapper

for deb in "$work"/debs/*.deb; do
	dpkg-deb --show --showformat='${Package} ${Version}\n' "$deb"
done >"$dest/VERSIONS"

version=$("$wrapper" --version 2>&1 | head -n 1) ||
	die "the provisioned llama-server does not start: $version"
say "provisioned $wrapper ($version; the package versions are in $dest/VERSIONS)"
