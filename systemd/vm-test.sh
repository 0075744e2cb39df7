#!/usr/bin/env bash
# systemd/vm-test.sh: proves that systemd/hookbox.service, installed exactly
# as README.md ("Running it as a service" -> "systemd") says, runs under a
# real systemd as PID 1 on a fresh Debian 12 (bookworm) and keeps the
# promises the README and SECURITY.md make about it.
#
#   sudo systemd/vm-test.sh          # from the project root; exit 0 = all PASS
#   sudo HOOKBOX_VM_MODE=deb systemd/vm-test.sh   # the Debian package instead
#
# HOOKBOX_VM_MODE=deb tests the .deb instead (systemd/vm-test-deb-guest.sh,
# about 20 checks): `cargo deb` builds hookbox_VERSION-1 and, from the same
# binary, hookbox_VERSION-2; the guest runs README.md's "From the Debian
# package" block as written (apt install ./hookbox_*.deb, one secret,
# hookbox check, systemctl enable --now), checks what the package installed
# and left alone (not enabled or started before that), a signed delivery,
# `man hookbox` and bash completion, then upgrades to -2 with an edit in
# the conffile (the service is restarted onto the new package, the edit
# and the event survive), and purges (the database and the secrets stay,
# and purge says so). Its Debian root adds man-db and bash-completion.
# Everything below describes the default mode.
#
# What it does:
#   1. cargo build --release --locked (the binary the README installs).
#   2. debootstrap a minimal bookworm with systemd and a kernel into
#      $HOOKBOX_VM_DIR/rootfs (default /var/tmp/hookbox-vm, outside the git
#      tree), once; later runs reuse it. It is never booted itself: each run
#      boots a fresh copy, so every run starts from a never-booted Debian.
#   3. Copies into that copy the binary, the units, the README's install
#      and socket activation blocks and its port 443 drop-in (extracted from
#      README.md, so the README is what is tested) and
#      systemd/vm-test-guest.sh, which a oneshot unit runs after boot.
#   4. Boots it with qemu-system-x86_64 under TCG (software emulation):
#      Debian's own kernel + initrd, the root as a raw ext4 image made with
#      mkfs.ext4 -d, systemd as PID 1. The guest's first serial port is the
#      console (console.log); its second carries only the test results
#      (results.log), which this script reads. The guest powers off when done;
#      `timeout` bounds the boot so the script never hangs.
#   5. Prints PASS/FAIL per check and exits non-zero on any failure, or if the
#      guest never reported.
#
# The guest checks (50; vm-test-guest.sh) cover the plain install (readiness,
# signed deliveries, the CLI and the API, the state directory's owner and
# modes, the watchdog, systemd-analyze security, restart and a clean stop),
# then port 443 both ways README.md offers: systemd/hookbox.socket installed
# by the README's "Socket activation" block (443 served with the unit as
# shipped, PrivateUsers=yes and no capabilities; a delivery sent during a
# restart, or to a stopped service, still gets 202; and systemd refusing to
# start the socket while hookbox runs, why the block stops it first), and
# the drop-in of the ACME setup's step 3 (CAP_NET_BIND_SERVICE), which binds
# 443 only together with its PrivateUsers=no line.
#
# Why qemu and not systemd-nspawn --boot: nspawn was tried first, but in the
# sandbox this was written in (a Firecracker VM with no systemd on the host,
# cgroup v1, no CAP_SYS_RESOURCE) the container's systemd never printed a
# line before the timeout. KVM is also unusable there (/dev/kvm exists but the
# guest kernel hangs after "Probing EDD"), so TCG it is; set HOOKBOX_VM_ACCEL=kvm
# where KVM works. A full run there takes about 5 minutes: roughly 1 min to
# boot, 1 min to set up, the rest the checks (one waits 45 s, longer than
# WatchdogSec; the port 443 ones about 1.5 min). The first run adds about 2
# minutes of debootstrap.
#
# Needs: root (debootstrap, and copying a root file system with its owners),
# debootstrap, qemu-system-x86 and e2fsprogs (mkfs.ext4 -d), cargo.
#   sudo apt-get install debootstrap qemu-system-x86
# Knobs: HOOKBOX_VM_DIR, HOOKBOX_VM_TIMEOUT (seconds, default 1200),
# HOOKBOX_VM_MIRROR, HOOKBOX_VM_ACCEL (tcg or kvm), HOOKBOX_VM_REBUILD=1
# (throw the cached root file system away first), HOOKBOX_VM_NO_BUILD=1
# (test the existing target/release/hookbox instead of building; in deb
# mode, package it with `cargo deb --no-build`), HOOKBOX_VM_MODE (source,
# the default, or deb; deb needs cargo-deb: cargo install --locked cargo-deb).
set -euo pipefail

cd "$(dirname "$0")/.."            # the project root, wherever we are run from
VM_DIR=${HOOKBOX_VM_DIR:-/var/tmp/hookbox-vm}
TIMEOUT=${HOOKBOX_VM_TIMEOUT:-1200}
MIRROR=${HOOKBOX_VM_MIRROR:-http://deb.debian.org/debian}
ACCEL=${HOOKBOX_VM_ACCEL:-tcg}
MODE=${HOOKBOX_VM_MODE:-source}
ROOTFS=$VM_DIR/rootfs
RUN=$VM_DIR/run
start=$(date +%s)

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'vm-test: %s\n' "$*" >&2; exit 2; }

((EUID == 0)) || die "run as root (debootstrap and the guest image need it)"
[[ $MODE == source || $MODE == deb ]] || die "HOOKBOX_VM_MODE is source or deb, not '$MODE'"
[[ $MODE == source ]] || cargo deb --version >/dev/null 2>&1 ||
    die "HOOKBOX_VM_MODE=deb needs cargo-deb: cargo install --locked cargo-deb"
for tool in debootstrap qemu-system-x86_64 mkfs.ext4 cargo timeout; do
    command -v "$tool" >/dev/null ||
        die "$tool not found; on Debian: apt-get install debootstrap qemu-system-x86 e2fsprogs"
done

# --- 1. The binary ------------------------------------------------------------
BIN=target/release/hookbox
if [[ ${HOOKBOX_VM_NO_BUILD:-} == 1 && -x $BIN ]]; then
    say "HOOKBOX_VM_NO_BUILD=1: testing the existing $BIN"
else
    say "cargo build --release --locked"
    cargo build --release --locked
fi
if [[ $MODE == deb ]]; then
    # The package the guest installs, then the same binary packaged again
    # with the next Debian revision: the upgrade it goes through.
    say "cargo deb: hookbox_*-1 and, for the upgrade, hookbox_*-2"
    rm -rf target/vm-test-debs
    mkdir -p target/vm-test-debs/install target/vm-test-debs/upgrade
    cargo deb --locked --no-build --output target/vm-test-debs/install/
    cargo deb --locked --no-build --deb-revision 2 --output target/vm-test-debs/upgrade/
    rm -f target/vm-test-debs/*/*.ddeb    # the debug symbols stay on the host
fi

# --- 2. A cached, never-booted Debian root --------------------------------------
# Only what a small Debian server has plus what the README's steps use: sudo
# (the README's commands are written with it), curl and openssl (to sign and
# send webhooks), a kernel for qemu. minbase keeps it small; the .complete
# marker means a half-finished debootstrap is never mistaken for a cache.
# ca-certificates is the README's own first step (`apt-get install`), done
# here because the guest has no network; see the README extraction below.
PACKAGES=systemd,systemd-sysv,dbus,sudo,curl,openssl,procps,linux-image-amd64,ca-certificates
# What `man hookbox` and tab completion need, which a minimal server may
# lack (the package only ships the files).
[[ $MODE == source ]] || PACKAGES+=,man-db,bash-completion
# The cache is keyed on the package list, so changing it builds a new root.
ROOTFS=$ROOTFS-$(md5sum <<<"$PACKAGES" | cut -c1-8)
if [[ ${HOOKBOX_VM_REBUILD:-} == 1 || ! -e $ROOTFS/.complete ]]; then
    say "debootstrap bookworm into $ROOTFS (once; takes a few minutes)"
    rm -rf "$ROOTFS"
    mkdir -p "$VM_DIR"
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOTFS" "$MIRROR"
    echo hookbox-vm >"$ROOTFS/etc/hostname"
    touch "$ROOTFS/.complete"
else
    say "reusing the Debian root in $ROOTFS"
fi

# --- 3. This run's copy, with the test payload -----------------------------------
say "preparing a fresh copy in $RUN"
rm -rf "$RUN"
mkdir -p "$RUN"
cp -a "$ROOTFS" "$RUN/root"
rm -f "$RUN/root/.complete"
# What the Debian installer writes, so sudo can resolve the host's own name.
printf '127.0.0.1\tlocalhost\n127.0.1.1\thookbox-vm\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    >"$RUN/root/etc/hosts"
payload=$RUN/root/root/hookbox-vm
if [[ $MODE == deb ]]; then
    mkdir -p "$payload/install" "$payload/upgrade"
    cp target/vm-test-debs/install/hookbox_*.deb "$payload/install/"
    cp target/vm-test-debs/upgrade/hookbox_*.deb "$payload/upgrade/"
    install -m 0755 systemd/vm-test-deb-guest.sh "$payload/guest.sh"
    # README.md's "From the Debian package" block, as written, minus
    # `journalctl -f` (follows for ever).
    awk '/^From the Debian package/ { want = 1; next }
         want && /^```sh/ { inside = 1; next }
         inside && /^```/ { exit }
         inside' README.md | grep -v '^journalctl .*-f' >"$payload/readme-deb-steps.sh"
    grep -q '^sudo apt install \./hookbox_\*\.deb$' "$payload/readme-deb-steps.sh" ||
        die "could not find the package steps (sudo apt install ./hookbox_*.deb) in README.md"
    say "README package steps the guest runs:"
    sed 's/^/    /' "$payload/readme-deb-steps.sh" >&2
else
    mkdir -p "$payload/project/target/release" "$payload/project/systemd"
    # Laid out like the project root, since the README's commands use paths
    # relative to it (target/release/hookbox, systemd/hookbox.service).
    install -m 0755 "$BIN" "$payload/project/target/release/hookbox"
    install -m 0644 systemd/hookbox.service "$payload/project/systemd/hookbox.service"
    install -m 0644 systemd/hookbox.socket "$payload/project/systemd/hookbox.socket"
    install -m 0755 systemd/vm-test-guest.sh "$payload/guest.sh"

    # The README's "Step by step, on Debian" block, as written, minus three
    # lines that cannot run in the guest: `apt-get install` (the guest is offline;
    # the packages it names are in the debootstrap list above), the build (done
    # above, on the host: the guest has no Rust toolchain) and `journalctl -f`
    # (follows for ever).
    awk '/^Step by step, on Debian/ { want = 1; next }
         want && /^```sh/ { inside = 1; next }
         inside && /^```/ { exit }
         inside' README.md |
        grep -v -e '^sudo apt-get install' -e '^cargo build' -e '^journalctl .*-f' >"$payload/readme-steps.sh"
    [[ -s $payload/readme-steps.sh ]] || die "could not find the systemd steps in README.md"
    say "README steps the guest runs:"
    sed 's/^/    /' "$payload/readme-steps.sh" >&2

    # Then, after the checks of the plain install: the README's "Socket
    # activation" block, as written, and the drop-in of the ACME setup's step 3
    # ("Let the service have port 443"), which the guest tries with and without
    # its PrivateUsers=no line.
    awk '/^\*\*Socket activation\*\*/ { want = 1; next }
         want && /^```sh/ { inside = 1; next }
         inside && /^```/ { exit }
         inside' README.md >"$payload/readme-socket.sh"
    grep -q 'hookbox.socket' "$payload/readme-socket.sh" ||
        die "could not find the socket activation steps in README.md"
    awk '/^3\. Let the service have port 443/ { want = 1; next }
         want && /^ *```ini/ { inside = 1; next }
         inside && /^ *```/ { exit }
         inside' README.md | sed 's/^ *//' >"$payload/readme-port443.ini"
    grep -q '^AmbientCapabilities=CAP_NET_BIND_SERVICE' "$payload/readme-port443.ini" ||
        die "could not find the port 443 drop-in (ACME step 3) in README.md"
    say "README socket activation steps the guest runs:"
    sed 's/^/    /' "$payload/readme-socket.sh" >&2
    say "README port 443 drop-in the guest tries:"
    sed 's/^/    /' "$payload/readme-port443.ini" >&2
fi

# The harness: a oneshot unit started once the system is up; its output goes
# to the second serial port (ttyS1 = results.log on the host); it powers the
# guest off whatever happens, so qemu exits.
cat >"$RUN/root/etc/systemd/system/hookbox-vm-test.service" <<'UNIT'
[Unit]
Description=hookbox VM test (systemd/vm-test-guest.sh)
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/root/hookbox-vm/guest.sh
ExecStopPost=/bin/systemctl --no-block poweroff
StandardOutput=file:/dev/ttyS1
StandardError=inherit
TimeoutStartSec=30min
[Install]
WantedBy=multi-user.target
UNIT
ln -s ../hookbox-vm-test.service \
    "$RUN/root/etc/systemd/system/multi-user.target.wants/hookbox-vm-test.service"

# --- 4. Boot it -----------------------------------------------------------------
say "building the root image (mkfs.ext4 -d)"
truncate -s 3G "$RUN/root.img"
mkfs.ext4 -q -F -L hookbox-root -d "$RUN/root" "$RUN/root.img"
# qemu boots Debian's own kernel and initrd directly (no boot loader needed).
cp "$(ls "$RUN"/root/boot/vmlinuz-* | tail -n1)" "$RUN/vmlinuz"
cp "$(ls "$RUN"/root/boot/initrd.img-* | tail -n1)" "$RUN/initrd.img"
rm -rf "$RUN/root"          # everything is in the image now

say "booting Debian with systemd as PID 1 (qemu, accel=$ACCEL, timeout ${TIMEOUT}s)"
say "console: $RUN/console.log  results: $RUN/results.log"
boot_start=$(date +%s)
: >"$RUN/results.log"
qemu_rc=0
timeout "$TIMEOUT" qemu-system-x86_64 \
    -machine q35,accel="$ACCEL" -cpu max -smp 2 -m 1024 \
    -display none -monitor none -nic none -no-reboot \
    -serial file:"$RUN/console.log" -serial file:"$RUN/results.log" \
    -kernel "$RUN/vmlinuz" -initrd "$RUN/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 systemd.show_status=auto" \
    -drive file="$RUN/root.img",format=raw,if=virtio || qemu_rc=$?
say "guest ran for $(($(date +%s) - boot_start)) s (qemu exit $qemu_rc)"

# --- 5. Results ------------------------------------------------------------------
results=$(tr -d '\r' <"$RUN/results.log")
grep -v '^VMTEST ' <<<"$results" >&2 || true    # the README steps' own output
grep '^VMTEST ' <<<"$results" | sed 's/^VMTEST //'
if ((qemu_rc == 124)); then
    echo "FAIL vm-timeout: the guest did not finish within ${TIMEOUT}s (see $RUN/console.log)"
    exit 1
fi
if ! grep -q '^VMTEST DONE ' <<<"$results"; then
    echo "FAIL vm-no-report: the guest test never finished (see $RUN/console.log)"
    exit 1
fi
passed=$(grep -c '^VMTEST PASS ' <<<"$results" || true)
failed=$(grep -c '^VMTEST FAIL ' <<<"$results" || true)
echo "vm-test: $passed passed, $failed failed, $(($(date +%s) - start)) s in all"
((failed == 0 && passed > 0))
