#!/bin/sh
# stage.sh BINARY DIR: the build context of deploy/image/Containerfile in DIR
# (created; it must not exist or be empty): the binary, every shared library
# it loads as ldd resolves them on this machine (symlinks followed), the
# dynamic loader, /etc/passwd and /etc/group naming uid 10001, a /tmp, and
# the empty /state and home folders the Containerfile hands to uid 10001.
set -eu
if [ $# -ne 2 ]; then
	echo "usage: $0 BINARY DIR" >&2
	exit 2
fi
bin=$1 ctx=$2
if [ ! -x "$bin" ]; then
	echo "$0: $bin: not an executable file (build it first: make build)" >&2
	exit 1
fi
if [ -e "$ctx" ] && [ -n "$(ls -A "$ctx")" ]; then
	echo "$0: $ctx: exists and is not empty (the context is built afresh)" >&2
	exit 1
fi
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp" "$ctx/state" "$ctx/home"
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/local/bin/pfedmma"
# ldd prints "name => /path (addr)" for each library and "/path (addr)" for
# the loader
ldd "$bin" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done
echo "root:x:0:0:root:/root:/sbin/nologin" >"$root/etc/passwd"
echo "pfedmma:x:10001:10001:pfedmma:/home/pfedmma:/sbin/nologin" >>"$root/etc/passwd"
echo "root:x:0:" >"$root/etc/group"
echo "pfedmma:x:10001:" >>"$root/etc/group"
echo "staged $(find "$root" -type f | wc -l) files in $ctx"
