#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: installs only what is missing.
# Needs root (apt) and network access to Debian's mirror and crates.io.
#   setup.sh        everything the tests and the lab use
#   setup.sh demo   only what `vtrace demo` needs (scripts/demo.sh): the
#                   toolchain, bpf-linker, redis and iproute2
set -euo pipefail
PROFILE=${1:-all}
case "$PROFILE" in all|demo) ;; *) echo "setup.sh: unknown profile '$PROFILE' (all or demo)" >&2; exit 2;; esac

log() { printf '[setup] %s\n' "$*" >&2; }

# LLVM major must match the nightly rustc that compiles the eBPF crate,
# because bpf-linker links LLVM bitcode produced by that rustc.
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
LLVM_MAJOR=$(rustc +nightly -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
[ -n "$LLVM_MAJOR" ] || { log "cannot read LLVM version from 'rustc +nightly -vV'"; exit 1; }

PKGS=(
  "llvm-${LLVM_MAJOR}-dev" libpolly-"${LLVM_MAJOR}"-dev zlib1g-dev libzstd-dev  # bpf-linker
  iproute2 procps redis-server redis-tools                                     # vtrace demo
)
if [ "$PROFILE" = all ]; then
  PKGS+=(
    iptables iputils-ping                                                      # bridge, ping
    iperf3 fio sysstat                                                         # workloads, mpstat
    mount                                                                      # losetup: the block layer test
    bpftrace linux-perf python3                                                # benches/overhead.py, calibrate.py
    runc crun busybox-static util-linux containerd                             # vtrace lab containers, containerd-runc, kata
    qemu-system-x86 cpio xz-utils e2fsprogs                                    # vtrace lab linuxvm, the VM platforms (xz: the ELF kernel; mkfs.ext4: the tools disk)
    docker.io lxc liblwip-dev                                                  # vtrace lab docker, lxc, lwip
    nodejs                                                                     # the module-load workload
    chromium fonts-dejavu-core                                                 # the HTML report's browser test
    prometheus python3-venv                                                    # vtrace serve's tests: Prometheus, promtool, DuckDB's venv
  )
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian redis-server package starts a daemon on :6379; vtrace starts its own.
if systemctl is-active --quiet redis-server 2>/dev/null; then systemctl stop redis-server || true; fi

# The test command's gates (cargo fmt --check, cargo clippy) on the stable toolchain.
for c in rustfmt clippy; do
  rustup component list --installed | grep -q "^$c" || rustup component add "$c"
done
rustup component list --toolchain nightly --installed | grep -q '^rust-src' \
  || rustup component add rust-src --toolchain nightly

if ! bpf-linker --version 2>/dev/null | grep -q '0.13.0'; then
  log "building bpf-linker 0.13.0 against LLVM ${LLVM_MAJOR} (~2 min)"
  LLVM_PREFIX=/usr/lib/llvm-${LLVM_MAJOR} PATH=/usr/lib/llvm-${LLVM_MAJOR}/bin:$PATH \
    cargo install --locked bpf-linker@0.13.0 --no-default-features --features "llvm-${LLVM_MAJOR}"
fi
# gVisor's runsc for `vtrace lab up gvisor` (Go module proxy; pinned for repeatable labs).
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
if [ "$PROFILE" = all ] && ! command -v runsc >/dev/null 2>&1; then
  if command -v go >/dev/null 2>&1; then
    log "building gVisor runsc ${GVISOR_VERSION} (~2 min)"
    CGO_ENABLED=0 GOBIN=/usr/local/bin go install "gvisor.dev/gvisor/runsc@${GVISOR_VERSION}"
  else
    log "go not found: skipping runsc (vtrace lab up gvisor will say so)"
  fi
fi
# The guest kernel of `vtrace lab up linuxvm` and of the stock-kernel guest
# tests (tests/tests/stock_kernel.rs): Debian's 6.1 kernel, which has the
# kprobes, module BTF, vhost-net and nested SVM the host kernel lacks. Pinned;
# when Debian's mirror no longer carries the pin (security updates replace the
# ABI package), the current linux-image-amd64 kernel is taken and said so.
GUEST_KERNEL=linux-image-6.1.0-56-amd64
GUEST_KERNEL_DIR=/var/lib/vtrace-lab/linuxvm/kernel
if [ "$PROFILE" = all ] && ! ls "$GUEST_KERNEL_DIR"/boot/vmlinuz-* >/dev/null 2>&1; then
  pkg=$GUEST_KERNEL
  if ! apt-cache show "$pkg" >/dev/null 2>&1; then
    apt-get update -qq
    if ! apt-cache show "$pkg" >/dev/null 2>&1; then
      pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -1)
      log "guest kernel: $GUEST_KERNEL no longer on the mirror; taking $pkg"
    fi
  fi
  log "guest kernel: $pkg into $GUEST_KERNEL_DIR"
  mkdir -p "$GUEST_KERNEL_DIR"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq "$pkg" >/dev/null)
  dpkg -x "$tmp"/*.deb "$GUEST_KERNEL_DIR"
  rm -rf "$tmp"
fi
# An SR-IOV NIC for the `sriov` platform one level down (tests/tests/sriov.rs):
# QEMU >= 8 emulates one (`-device igb`, an 82576 with 7 VFs); Debian 12's
# QEMU is 7.2. QEMU 10 from bookworm-backports is unpacked into a private
# prefix (the host's QEMU stays); it runs on bookworm's libraries. Pinned;
# when the mirror no longer has the pin, the backports index names the
# current version.
SRIOV_QEMU_DIR=/var/lib/vtrace-lab/qemu-sriov
SRIOV_QEMU_VERSION=1:10.0.2+ds-2+deb13u1~bpo12+1
MIRROR=http://deb.debian.org/debian
if [ "$PROFILE" = all ] && ! [ -x "$SRIOV_QEMU_DIR/usr/bin/qemu-system-x86_64" ]; then
  tmp=$(mktemp -d)
  fetch_qemu() {  # $1: version
    local v=${1#*:} ok=1
    for pkg in qemu-system-x86_"$v"_amd64 qemu-system-common_"$v"_amd64 qemu-system-data_"$v"_all; do
      curl -fsSL -o "$tmp/$pkg.deb" "$MIRROR/pool/main/q/qemu/$pkg.deb" || ok=0
    done
    [ $ok = 1 ]
  }
  if ! fetch_qemu "$SRIOV_QEMU_VERSION"; then
    v=$(curl -fsSL "$MIRROR/dists/bookworm-backports/main/binary-amd64/Packages.xz" | xz -dc \
        | awk '/^Package: qemu-system-x86$/{p=1} p&&/^Version:/{print $2; exit}')
    log "SR-IOV QEMU: $SRIOV_QEMU_VERSION no longer on the mirror; taking ${v:-nothing}"
    rm -f "$tmp"/*.deb
    [ -n "$v" ] && fetch_qemu "$v" || { log "SR-IOV QEMU: no qemu-system-x86 in bookworm-backports"; exit 1; }
  fi
  log "SR-IOV QEMU: $(ls "$tmp" | tr '\n' ' ')into $SRIOV_QEMU_DIR"
  mkdir -p "$SRIOV_QEMU_DIR"
  for d in "$tmp"/*.deb; do dpkg -x "$d" "$SRIOV_QEMU_DIR"; done
  rm -rf "$tmp"
fi
log "ok: nightly LLVM ${LLVM_MAJOR}, bpf-linker $(bpf-linker --version | awk '{print $2}')"
