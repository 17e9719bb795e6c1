#!/bin/busybox sh
# The kernel lab's /init (scripts/lab.sh puts it in the initramfs): reaches the host over 9p,
# loads the modules the job asks for, and runs the job's command chrooted into the host's
# read-only root, then writes its exit status where lab.sh reads it and powers off.
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

V9P="trans=virtio,version=9p2000.L,msize=512000"
fail() {
    echo "lab-init: $*"
    # (busybox here has no mountpoint applet: /proc/mounts says whether /job is the share.)
    if grep -q "^labjob /job " /proc/mounts 2>/dev/null; then
        echo "$*" >/job/setup-error
        echo setup >/job/rc
    fi
    sync
    poweroff -f
}

for m in netfs 9pnet 9pnet_virtio 9p; do
    insmod "/lib/modules/$m.ko" || fail "insmod $m.ko failed"
done
mkdir -p /job
mount -t 9p -o "$V9P" labjob /job || fail "mounting the job directory (9p tag labjob) failed"
# The host's root does not change under the guest: its pages may be cached.
mount -t 9p -o "$V9P,cache=loose,ro" hostroot /host || fail "mounting the host's root (9p tag hostroot) failed"

# One module a line: its path on the host, then its parameters (KEY=VALUE ...).
while read -r ko params; do
    [ -n "$ko" ] || continue
    insmod "/host$ko" $params || fail "insmod $ko $params failed"
done </job/modules

# The guest's own file systems first, then the shares on top: a share under /tmp, /run or
# /dev/shm (a work tree cloned to /tmp, say) gets its mount point made inside the tmpfs
# that would otherwise hide the host's directory of that name.
mount -t proc proc /host/proc || fail "mounting /proc failed"
mount -t sysfs sys /host/sys || fail "mounting /sys failed"
mount -t devtmpfs dev /host/dev || fail "mounting /dev failed"
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs -o mode=1777 shm /host/dev/shm || fail "mounting /dev/shm failed"
mount -t tmpfs -o mode=1777 tmp /host/tmp || fail "mounting /tmp failed"
mount -t tmpfs -o mode=755 run /host/run || fail "mounting /run failed"
mkdir -p /host/run/lab
mount -o bind /job /host/run/lab || fail "binding the job directory failed"
# One writable share a line, "TAG DIR", parents before children (lab.sh sorts them), so
# that no share hides another; lab.sh refuses a DIR that would hide the file systems above.
while read -r tag d; do
    [ -n "$d" ] || continue
    [ -d "/host$d" ] || mkdir -p "/host$d" || fail "making the mount point of $d failed"
    # Writable, and written by both sides of a test (fds, files): no caching.
    mount -t 9p -o "$V9P,cache=mmap" "$tag" "/host$d" || fail "mounting $d writable (9p tag $tag) failed"
done </job/rw

chroot /host /bin/bash /run/lab/run.sh >/job/stdout 2>/job/stderr </dev/null
echo $? >/job/rc.tmp && mv /job/rc.tmp /job/rc
sync
poweroff -f
