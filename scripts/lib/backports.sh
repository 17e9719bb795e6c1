# Sourced by setup.sh and lab.sh: adds Debian's bookworm-backports suite to apt's sources
# once (GStreamer's -dev packages, QEMU, meson and the lab's kernel come from there; a plain
# `apt-get install` of them fails with "held broken packages"). Uses $SUDO from the caller.
ensure_backports() {
    grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/ && return 0
    echo "adding the bookworm-backports suite to apt's sources" >&2
    ${SUDO:-} tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
}
