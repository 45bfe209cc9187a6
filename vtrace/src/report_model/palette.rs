//! Colours by series name, so that a state, role or platform looks the same
//! in every figure and flamegraph.

use plotters::style::RGBColor;

/// The CPU states, in the order every figure stacks them.
pub(crate) const STATE_COLORS: [(&str, RGBColor); 6] = [
    ("user", RGBColor(0x4c, 0x72, 0xb0)),
    ("system", RGBColor(0xdd, 0x84, 0x52)),
    ("softirq", RGBColor(0x55, 0xa8, 0x68)),
    ("hardirq", RGBColor(0xc4, 0x4e, 0x52)),
    ("guest", RGBColor(0x81, 0x72, 0xb3)),
    ("idle", RGBColor(0xbb, 0xbb, 0xbb)),
];

/// Colours for everything else (roles, platforms, devices), chosen by a
/// hash of the name: the same name gets the same colour in every figure and
/// every report.
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// The platform roles (vtrace/src/platforms/profiles.toml and the host's
/// own), each its own colour, none a state's.
pub(crate) const ROLE_COLORS: [(&str, RGBColor); 19] = [
    ("app", RGBColor(0x1f, 0x77, 0xb4)),
    ("vmm", RGBColor(0xff, 0x7f, 0x0e)),
    ("vcpu", RGBColor(0x94, 0x67, 0xbd)),
    ("vhost", RGBColor(0x2c, 0xa0, 0x2c)),
    ("io-thread", RGBColor(0x17, 0xbe, 0xcf)),
    ("agent", RGBColor(0x8c, 0x56, 0x4b)),
    ("virtiofsd", RGBColor(0x39, 0x3b, 0x79)),
    ("sandbox", RGBColor(0xe3, 0x77, 0xc2)),
    ("gofer", RGBColor(0xbc, 0xbd, 0x22)),
    ("shim", RGBColor(0x6b, 0x6e, 0xcf)),
    ("runtime", RGBColor(0x9c, 0x9e, 0xde)),
    ("stack", RGBColor(0xad, 0x49, 0x4a)),
    ("api", RGBColor(0xe7, 0xba, 0x52)),
    ("monitor", RGBColor(0x63, 0x79, 0x39)),
    ("kernel", RGBColor(0x52, 0x54, 0xa3)),
    ("other", RGBColor(0xd6, 0x27, 0x28)),
    ("vtrace", RGBColor(0x33, 0x33, 0x33)),
    ("stress", RGBColor(0x99, 0x99, 0x99)),
    ("idle", RGBColor(0xbb, 0xbb, 0xbb)),
];

/// The platforms vtrace knows (vtrace/src/platforms/profiles.toml), each its
/// own colour: bench figures put up to all of them side by side.
pub(crate) const PLATFORM_COLORS: [(&str, RGBColor); 17] = [
    ("host", RGBColor(0x4e, 0x79, 0xa7)),
    ("runc", RGBColor(0xf2, 0x8e, 0x2b)),
    ("crun", RGBColor(0xed, 0xc9, 0x48)),
    ("lxc", RGBColor(0x76, 0xb7, 0xb2)),
    ("docker", RGBColor(0x59, 0xa1, 0x4f)),
    ("gvisor", RGBColor(0xb0, 0x7a, 0xa1)),
    ("linuxvm", RGBColor(0xe1, 0x57, 0x59)),
    ("lwip", RGBColor(0x9c, 0x75, 0x5f)),
    ("firecracker", RGBColor(0xff, 0x9d, 0xa7)),
    ("kata", RGBColor(0x17, 0xbe, 0xcf)),
    ("unikraft", RGBColor(0xbc, 0xbd, 0x22)),
    ("sriov", RGBColor(0x7f, 0x7f, 0x7f)),
    // The VM platforms, as detection and the lab name them.
    ("qemu-kvm", RGBColor(0xd6, 0x27, 0x28)),
    ("qemu-kvm-novhost", RGBColor(0xff, 0x98, 0x96)),
    ("unikraft-vhost", RGBColor(0x8c, 0x8d, 0x00)),
    ("unikraft-virtio", RGBColor(0xdb, 0xdb, 0x8d)),
    // Any other VMM.
    ("kvm-vm", RGBColor(0x39, 0x3b, 0x79)),
];

/// The data path's stages (vtrace_common::path_stage::NAMES), each its
/// own colour in every report: host -> guest warm, guest -> host cool,
/// passthrough (pt) apart, a guest's own stages lighter than the host's.
pub(crate) const STAGE_COLORS: [(&str, RGBColor); vtrace_common::path_stage::COUNT] = [
    ("rx_tap_queue", RGBColor(0xff, 0x7f, 0x0e)),
    ("rx_signal", RGBColor(0xd6, 0x27, 0x28)),
    ("rx_inject", RGBColor(0xe3, 0x77, 0xc2)),
    ("rx_entry", RGBColor(0x8c, 0x56, 0x4b)),
    ("tx_kick", RGBColor(0x1f, 0x77, 0xb4)),
    ("tx_serve", RGBColor(0x17, 0xbe, 0xcf)),
    ("tx_tap", RGBColor(0x2c, 0xa0, 0x2c)),
    ("pt_signal", RGBColor(0x94, 0x67, 0xbd)),
    ("pt_inject", RGBColor(0xbc, 0xbd, 0x22)),
    ("pt_entry", RGBColor(0x39, 0x3b, 0x79)),
    ("pt_hardirq", RGBColor(0x7f, 0x7f, 0x7f)),
    ("guest_rx_poll", RGBColor(0xff, 0xbb, 0x78)),
    ("guest_rx_stack", RGBColor(0xff, 0x98, 0x96)),
    ("guest_tx_kick", RGBColor(0xae, 0xc7, 0xe8)),
    ("guest_tx_notify", RGBColor(0x9e, 0xda, 0xe5)),
    ("guest_tx_xmit", RGBColor(0xc7, 0xc7, 0xc7)),
];

/// The parts of a round trip across the boundary that are no path stage
/// (views/boundary.rs): the two crossings and the guest's stack between its
/// poll and its reply, lighter still.
pub(crate) const BOUNDARY_PART_COLORS: [(&str, RGBColor); 3] = [
    ("guest_irq", RGBColor(0xc4, 0x9c, 0x94)),
    ("guest_reply", RGBColor(0xc5, 0xb0, 0xd5)),
    ("guest_trap", RGBColor(0xf7, 0xb6, 0xd2)),
];

/// A vCPU thread's time as the host saw it, beside the guest's own states
/// (layers/guest/summary.rs): in guest mode is the `guest` state's colour.
pub(crate) const VCPU_COLORS: [(&str, RGBColor); 2] = [
    ("exits", RGBColor(0x8c, 0x6d, 0x31)),
    ("not running", RGBColor(0xe7, 0xe7, 0xe7)),
];

/// The colour of a state, role ("platform/role" too) or platform; any other
/// name gets a stable one from the palette.
pub fn color_of(name: &str) -> RGBColor {
    if let Some((_, c)) = STATE_COLORS.iter().chain(&VCPU_COLORS).find(|(s, _)| *s == name) {
        return *c;
    }
    if let Some((_, c)) = STAGE_COLORS
        .iter()
        .chain(&BOUNDARY_PART_COLORS)
        .find(|(s, _)| *s == name)
    {
        return *c;
    }
    // "platform/role": by its role, so a role looks the same on every platform.
    let role = name.rsplit('/').next().unwrap_or(name);
    if let Some((_, c)) = ROLE_COLORS.iter().find(|(r, _)| *r == role) {
        return *c;
    }
    if let Some((_, c)) = PLATFORM_COLORS.iter().find(|(p, _)| *p == name) {
        return *c;
    }
    // FNV-1a: stable across runs and builds, unlike std's hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    PALETTE[(hash % PALETTE.len() as u64) as usize]
}
