//! Which driver a network device belongs to, for the programs on
//! tracepoints every device fires (net_dev_start_xmit): told by its
//! `netdev_ops`, the driver's own table of functions.

use crate::{
    config::{address, conf},
    kmem::read_or_zero,
};

/// `dev->netdev_ops`: 0 when unknown.
#[inline(always)]
pub fn netdev_ops(dev: u64) -> u64 {
    let at = conf!(net_device.dev_netdev_ops);
    if at == 0 {
        return 0;
    }
    read_or_zero(dev, at)
}

/// Whether `ops` (a device's [`netdev_ops`]) are a tun or a tap device's:
/// they transmit with tun_net_xmit. Told by the function, not the tables
/// (tun_netdev_ops, tap_netdev_ops): kallsyms lists functions on every
/// kernel, data only with CONFIG_KALLSYMS_ALL.
#[inline(always)]
pub fn is_tun(ops: u64) -> bool {
    let tun_net_xmit = address(conf!(net_device.tun_net_xmit_lo), conf!(net_device.tun_net_xmit_hi));
    let at = conf!(net_device.ops_ndo_start_xmit);
    ops != 0 && tun_net_xmit != 0 && at != 0 && read_or_zero::<u64>(ops, at) == tun_net_xmit
}
