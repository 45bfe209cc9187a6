//! The tun layer's Prometheus series (`vtrace serve`): frames through the
//! tun/tap and vhost-net functions, per device, function and role.

use crate::{
    exposition::{Family, INSTANCE, Kind, Samples, Unit, or},
    recording::TableSet,
};

use super::TunRow;

pub static FRAMES: Family = Family {
    name: "tun_frames",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Frames through a tun/tap or vhost-net function (tun_get_user, tun_put_user, handle_tx, handle_rx, \
           ...) per device, function, and the role of the thread that ran it.",
};

pub static BYTES: Family = Family {
    name: "tun",
    unit: Some(Unit::Bytes),
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Bytes through a tun/tap or vhost-net function per device, function and role.",
};

pub fn metrics(tables: &TableSet, out: &mut Samples) {
    for r in tables.rows::<TunRow>() {
        let labels = vec![
            ("device", r.device.clone()),
            ("function", r.function.clone()),
            ("platform", or(&r.owner.platform, "host")),
            (INSTANCE, or(&r.owner.instance, "none")),
            ("role", or(&r.owner.role, "other")),
        ];
        let source = format!("{}/{}/{}/{}", r.netns, r.ifindex, r.function, r.owner.pid);
        out.push(&FRAMES, source.clone(), labels.clone(), r.frames as f64);
        out.push(&BYTES, source, labels, r.bytes as f64);
    }
}
