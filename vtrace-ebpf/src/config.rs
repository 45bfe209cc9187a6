//! The load-time configuration userspace writes (`EbpfLoader::override_global`):
//! one [`Config`] (offsets resolved from the running kernel's BTF and
//! tracepoint format files, and each layer's switches).

use vtrace_common::Config;
pub use vtrace_common::address;

#[unsafe(no_mangle)]
pub static CONFIG: Config = unsafe { core::mem::zeroed() };

/// `conf!(net_device.skb_len)`: one field of [`CONFIG`], read without letting the
/// compiler fold it to its initial 0.
macro_rules! conf {
    ($group:ident . $field:ident) => {
        $crate::config::read(core::ptr::addr_of!($crate::config::CONFIG.$group.$field))
    };
}
pub(crate) use conf;

#[inline(always)]
pub fn read(field: *const u32) -> u32 {
    // A field of CONFIG: always valid, never written by the programs.
    unsafe { core::ptr::read_volatile(field) }
}
