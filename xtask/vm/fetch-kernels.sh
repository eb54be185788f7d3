#!/bin/bash
# fetch-kernels.sh [DEST]  -- download Debian's packaged amd64 kernels and unpack them
#
# For each suite below, resolves the `linux-image-amd64` metapackage to the
# concrete linux-image-<abi>-amd64 package, downloads it with `apt-get download`
# using a PRIVATE apt configuration (own sources.list, lists, cache; the host's
# apt sources and state are not touched), and unpacks it with `dpkg-deb -x` into
#   DEST/<label>/            (boot/vmlinuz-*, lib/modules/<kver>/...)
#   DEST/<label>/KVER        (the kernel release string, e.g. 6.1.0-56-amd64)
#   DEST/<label>/PACKAGE     (package name and version)
# A suite that cannot be reached is reported and skipped.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:-$HERE/kernels}
APTDIR=${APTDIR:-$HERE/apt-private}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECMIRROR=${SECMIRROR:-http://deb.debian.org/debian-security}

# label | sources.list lines (';' separated)
SUITES=(
  "6.1|deb $MIRROR bookworm main;deb $SECMIRROR bookworm-security main"
  "6.12-bpo|deb $MIRROR bookworm-backports main"
  "6.12|deb $MIRROR trixie main;deb $SECMIRROR trixie-security main"
)

# Uncompressed vmlinux (ELF with a PVH entry note; Debian has CONFIG_PVH=y):
# QEMU boots it directly via PVH, skipping SeaBIOS real-mode setup and the
# in-guest xz/zstd decompression, which costs ~4 s under TCG.
extract_vmlinux() {
  local img=$1 dst=$2 off magic tool
  for magic in '\xfd7zXZ\x00:xz -dc --single-stream' '\x28\xb5\x2f\xfd:zstd -dcq' '\x1f\x8b\x08:gzip -dcq'; do
    tool=${magic#*:}; magic=${magic%%:*}
    for off in $(LC_ALL=C grep -obUaP "$magic" "$img" | cut -d: -f1); do
      tail -c +$((off + 1)) "$img" | $tool >"$dst" 2>/dev/null || true
      if [ "$(head -c 4 "$dst" | od -An -c | tr -d ' ')" = '177ELF' ]; then
        echo "   vmlinux extracted ($(du -h "$dst" | cut -f1), ${tool%% *})"; return 0
      fi
    done
  done
  rm -f "$dst"; echo "   !! could not extract vmlinux from $img (vm-run.sh will boot the bzImage)"
}

mkdir -p "$DEST"
for entry in "${SUITES[@]}"; do
  label=${entry%%|*}
  lines=${entry#*|}
  d=$APTDIR/$label
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/etc/sources.list.d" "$d/etc/preferences.d"
  tr ';' '\n' <<<"$lines" >"$d/etc/sources.list"
  APT=(apt-get -q
       -o Dir::Etc::sourcelist="$d/etc/sources.list"
       -o Dir::Etc::sourceparts="$d/etc/sources.list.d"
       -o Dir::Etc::preferencesparts="$d/etc/preferences.d"
       -o Dir::State::Lists="$d/lists"
       -o Dir::Cache="$d/cache"
       -o Dir::State::status=/dev/null
       -o APT::Architecture=amd64
       -o APT::Architectures::=amd64
       -o Acquire::Languages=none)
  echo "== [$label] apt-get update ($lines)"
  if ! "${APT[@]}" update >"$d/update.log" 2>&1 || grep -qE '^(E:|Err:)' "$d/update.log"; then
    echo "   !! update failed for $label (suite unreachable?):"; sed 's/^/      /' "$d/update.log" | tail -5
    continue
  fi
  ACACHE=(apt-cache "${APT[@]:2}")
  # metapackage -> concrete image package (highest version across the suite's sources)
  pkg=$("${ACACHE[@]}" depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
  if [ -z "$pkg" ]; then
    echo "   !! no linux-image-amd64 in $label"; continue
  fi
  ver=$("${ACACHE[@]}" policy "$pkg" | awk '/Candidate:/{print $2}')
  # for backports the metapackage in the default-pinned suite may just be missing;
  # in that case linux-image-amd64 resolves anyway since pin priority is ignored for download
  echo "   $pkg $ver"
  out=$DEST/$label
  if [ -f "$out/PACKAGE" ] && [ "$(cat "$out/PACKAGE")" = "$pkg $ver" ]; then
    echo "   already unpacked in $out"
    [ -f "$out/vmlinux" ] || extract_vmlinux "$out/boot/vmlinuz-$(cat "$out/KVER")" "$out/vmlinux"
    continue
  fi
  rm -rf "$out"; mkdir -p "$out"
  (cd "$d/cache/archives" && "${APT[@]}" download "$pkg=$ver" >"$d/download.log" 2>&1) || {
    echo "   !! download failed"; tail -5 "$d/download.log"; continue; }
  deb=$(ls -t "$d"/cache/archives/"${pkg}"_*.deb | head -1)
  dpkg-deb -x "$deb" "$out"
  moddir=$out/lib/modules; [ -d "$moddir" ] || moddir=$out/usr/lib/modules   # trixie: merged /usr
  kver=$(ls "$moddir" | head -1)
  echo "$kver" >"$out/KVER"
  extract_vmlinux "$out/boot/vmlinuz-$kver" "$out/vmlinux"
  echo "$pkg $ver" >"$out/PACKAGE"
  # Note: modules.dep is NOT shipped (Debian's postinst runs depmod); vm-run.sh
  # resolves module dependencies itself from each .ko's .modinfo "depends=".
  echo "   -> $out (kernel $kver, $(du -sh "$deb" | cut -f1) .deb, $(du -sh "$out" | cut -f1) unpacked)"
done
