#!/bin/bash
# vm-run.sh [OPTIONS] KERNEL_DIR -- CMD [ARGS...]
#
# Boots the Debian kernel unpacked in KERNEL_DIR (by fetch-kernels.sh) in QEMU
# with the HOST's root filesystem shared read-only over 9p (virtio), runs CMD as
# root inside the VM (chroot into the shared root, same cwd as here), streams
# its stdout+stderr to our stdout, powers off and exits with CMD's exit code.
#
# Inside the VM: / = host root (ro, 9p, /tmp included: a checkout under /tmp stays
# visible), /run /dev/shm = tmpfs, TMPDIR=/run/tmp (writable), /proc,
# /sys, /dev (devtmpfs), /dev/pts, /sys/kernel/tracing, /sys/kernel/debug,
# /sys/fs/bpf, /sys/fs/cgroup (cgroup2); lo is up; $VMTEST_OUT=/run/vmtest is a
# writable 9p dir that is a host temp dir (kept with --keep).
#
# Options (before KERNEL_DIR):
#   -m MEM        guest memory (default 2G)
#   -s N          vCPUs (default 2)
#   -t SECS       wall-clock timeout for the whole VM (default 300) -> exit 124
#   -e VAR=VAL    extra environment variable for CMD (repeatable)
#   --tcg         force TCG (no KVM)
#   --keep        keep the work dir (console log, out dir) and print its path
#   -v            print the kernel console log to stderr after the run
# Exit codes: CMD's exit code; 124 timeout; 125 VM/infra failure (no exit code
# came back: console log tail is printed to stderr).
set -euo pipefail

MEM=2G SMP=2 TIMEOUT=300 FORCE_TCG=0 KEEP=0 VERBOSE=0
EXTRA_ENV=()
while [ $# -gt 0 ]; do
  case $1 in
    -m) MEM=$2; shift 2;;
    -s) SMP=$2; shift 2;;
    -t) TIMEOUT=$2; shift 2;;
    -e) EXTRA_ENV+=("$2"); shift 2;;
    --tcg) FORCE_TCG=1; shift;;
    --keep) KEEP=1; shift;;
    -v) VERBOSE=1; shift;;
    -h|--help) sed -n '2,25p' "$0"; exit 0;;
    *) break;;
  esac
done
[ $# -ge 3 ] && [ "$2" = "--" ] || { echo "usage: $0 [opts] KERNEL_DIR -- CMD [ARGS...]" >&2; exit 2; }
KDIR=$(cd "$1" && pwd); shift 2

BUSYBOX=${BUSYBOX:-/bin/busybox}   # must be static (busybox-static)
KVER=$(cat "$KDIR/KVER")
# Prefer the uncompressed vmlinux (PVH boot, see fetch-kernels.sh): ~4 s faster under TCG.
if [ -z "${VMLINUZ:-}" ]; then
  VMLINUZ=$KDIR/boot/vmlinuz-$KVER; [ -f "$KDIR/vmlinux" ] && VMLINUZ=$KDIR/vmlinux
fi
MODDIR=$KDIR/lib/modules/$KVER
[ -d "$MODDIR" ] || MODDIR=$KDIR/usr/lib/modules/$KVER
[ -f "$VMLINUZ" ] && [ -d "$MODDIR" ] || { echo "vm-run: no kernel/modules in $KDIR" >&2; exit 125; }

WORK=$(mktemp -d /tmp/vm-run.XXXXXX)
cleanup() { [ "$KEEP" = 1 ] && echo "vm-run: work dir kept: $WORK" >&2 || rm -rf "$WORK"; }
trap cleanup EXIT
OUT=$WORK/out; IRD=$WORK/initrd; mkdir -p "$OUT" "$IRD"/{bin,modules,proc,sys,dev,newroot}

# ---------- initramfs: static busybox + /init + the few modules 9p needs ----------
# Load order is resolved from each module's .modinfo "depends=" (no modules.dep:
# Debian's package doesn't ship it and the host has no depmod). Modules that
# are built in (listed in modules.builtin) or absent are skipped. .ko.xz/.ko.zst
# are decompressed here so busybox insmod can load them.
declare -A KO_PATH=() SEEN=()
while IFS= read -r f; do b=${f##*/}; b=${b%%.ko*}; KO_PATH[${b//-/_}]=$f; done \
  < <(find "$MODDIR/kernel" -name '*.ko*')
ORDER=()
ko_cat() { case $1 in *.xz) xz -dc "$1";; *.zst) zstd -dcq "$1";; *.gz) gzip -dc "$1";; *) cat "$1";; esac; }
add_mod() {
  local m=${1//-/_}
  [ -n "${SEEN[$m]:-}" ] && return; SEEN[$m]=1
  local f=${KO_PATH[$m]:-}
  [ -n "$f" ] || return 0            # built in (or not present)
  local tmp=$WORK/$m.ko
  ko_cat "$f" >"$tmp"
  local deps; deps=$(tr '\0' '\n' <"$tmp" | sed -n 's/^depends=//p' | head -1)
  local d; for d in ${deps//,/ }; do add_mod "$d"; done
  ORDER+=("$m"); mv "$tmp" "$IRD/modules/$(printf %02d ${#ORDER[@]})-$m.ko"
}
for m in virtio_pci 9pnet_virtio 9p; do add_mod "$m"; done
cp "$BUSYBOX" "$IRD/bin/busybox"

cat >"$IRD/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
log() { echo "vm-init: $*" >/dev/ttyS0; }
fail() { log "FATAL: $*"; echo "VMTEST_EXIT_CODE=125" >/dev/ttyS0; poweroff -f; }
for m in /modules/*.ko; do insmod "$m" || log "insmod $m failed"; done
R=/newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot $R || fail "mount hostroot"
mount -t tmpfs -o mode=755 tmpfs $R/run || fail "tmpfs /run"
mkdir -p $R/run/vmtest
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmout $R/run/vmtest || fail "mount vmout"
mkdir -p $R/run/tmp && chmod 1777 $R/run/tmp
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tracefs tracefs $R/sys/kernel/tracing || log "no tracefs"
mount -t debugfs debugfs $R/sys/kernel/debug || log "no debugfs"
mount -t bpf bpf $R/sys/fs/bpf || log "no bpffs"
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup || log "no cgroup2"
ip link set lo up 2>/dev/null
hostname vmtest
stty -F /dev/ttyS1 raw -echo 2>/dev/null
cut -d' ' -f1 /proc/uptime > $R/run/vmtest/uptime_start
chroot $R /bin/bash /run/vmtest/cmd.sh </dev/null >/dev/ttyS1 2>&1
rc=$?
cut -d' ' -f1 /proc/uptime > $R/run/vmtest/uptime_end
echo $rc > $R/run/vmtest/exit_code
sync
echo "VMTEST_EXIT_CODE=$rc" >/dev/ttyS0
poweroff -f
EOF
chmod +x "$IRD/init"
(cd "$IRD" && find . | cpio -o -H newc --quiet | gzip -1 >"$WORK/initrd.gz")

# ---------- the command script, run by host bash inside the chroot ----------
{
  echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb'
  echo 'export VMTEST_OUT=/run/vmtest TMPDIR=/run/tmp'
  for kv in "${EXTRA_ENV[@]}"; do printf 'export %q\n' "$kv"; done
  printf 'cd %q 2>/dev/null || cd /\n' "$PWD"
  printf 'exec'; printf ' %q' "$@"; echo
} >"$OUT/cmd.sh"

# ---------- QEMU ----------
# KVM only if /dev/kvm is usable AND it is not the PVM flavour (kvm_pvm module:
# "Pagetable-based VM" nested virtualization that can only run PVM-patched guest
# kernels; stock Debian kernels hang right after the real-mode setup code).
ACCEL=(-accel kvm -cpu host)
why=
if [ "$FORCE_TCG" = 1 ]; then why="--tcg given"
elif ! [ -r /dev/kvm ] || ! [ -w /dev/kvm ]; then why="no usable /dev/kvm"
elif [ -d /sys/module/kvm_pvm ]; then why="host KVM is kvm_pvm (runs only PVM guest kernels)"
fi
if [ -n "$why" ]; then
  ACCEL=(-accel tcg,thread=multi,tb-size=256 -cpu max); echo "vm-run: using TCG ($why)" >&2
fi
CONSOLE=$WORK/console.log
QEMU=(qemu-system-x86_64 "${ACCEL[@]}" -M pc -m "$MEM" -smp "$SMP"
  -nodefaults -no-user-config -display none -no-reboot
  -kernel "$VMLINUZ" -initrd "$WORK/initrd.gz"
  -append "console=ttyS0 panic=-1 oops=panic loglevel=$([ "$VERBOSE" = 1 ] && echo 7 || echo 4) rdinit=/init"
  -chardev file,id=con,path="$CONSOLE" -serial chardev:con
  -chardev stdio,id=out,signal=off -serial chardev:out
  -fsdev local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap
  -device virtio-9p-pci,fsdev=fsroot,mount_tag=hostroot
  -fsdev local,id=fsout,path="$OUT",security_model=none
  -device virtio-9p-pci,fsdev=fsout,mount_tag=vmout)
T0=$(date +%s.%N)
set +e
timeout --kill-after=5 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>"$WORK/qemu.err"
qrc=$?
set -e
T1=$(date +%s.%N)

[ "$VERBOSE" = 1 ] && { echo "----- console ($KVER) -----"; cat "$CONSOLE"; } >&2
if [ -s "$WORK/qemu.err" ]; then sed 's/^/vm-run: qemu: /' "$WORK/qemu.err" >&2; fi
if [ -f "$OUT/exit_code" ]; then
  rc=$(cat "$OUT/exit_code")
  printf 'vm-run: kernel %s: exit %s, cmd started at guest uptime %ss, ran %ss, host wall %.2fs\n' \
    "$KVER" "$rc" "$(cat "$OUT/uptime_start")" \
    "$(echo "$(cat "$OUT/uptime_end") - $(cat "$OUT/uptime_start")" | bc 2>/dev/null || echo '?')" \
    "$(echo "$T1 - $T0" | bc 2>/dev/null || echo 0)" >&2
  exit "$rc"
fi
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then echo "vm-run: timeout after ${TIMEOUT}s" >&2; rc=124
else echo "vm-run: VM failed (qemu rc $qrc), no exit code" >&2; rc=125; fi
echo "----- console tail ($CONSOLE) -----" >&2; tail -30 "$CONSOLE" >&2 || true
exit $rc
