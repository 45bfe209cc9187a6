//! Who a row's work belongs to: one record, flattened into every table
//! that names its owner, so the five columns are declared once.

use polars_core::prelude::{Column, DataFrame};

use super::table::{ColumnError, ColumnValue, Columns};

/// The process a row counted, its name, and where it sits: its platform,
/// the instance of that platform and its role there. Flattened into its
/// table (`#[serde(flatten)] owner: Owner`): the columns are `pid`,
/// `comm`, `platform`, `instance` and `role`, as before the record.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Owner {
    /// Thread group id (the process id); 0 for a thread gone before vtrace
    /// could name it.
    pub pid: u32,
    /// The thread's name for a per-thread row, its process's for a
    /// per-process row.
    pub comm: String,
    /// The platform (`host` outside every instance).
    pub platform: String,
    /// Platform instance id (`<platform>:<root pid>`), empty on the host.
    pub instance: String,
    /// Platform component: app, vmm, vcpu, kernel, idle, vtrace, other, ...
    pub role: String,
}

impl Columns for Owner {
    fn columns(_field: &str, owners: Vec<Self>) -> Vec<Column> {
        let mut pid = Vec::with_capacity(owners.len());
        let mut comm = Vec::with_capacity(owners.len());
        let mut platform = Vec::with_capacity(owners.len());
        let mut instance = Vec::with_capacity(owners.len());
        let mut role = Vec::with_capacity(owners.len());
        for o in owners {
            pid.push(o.pid);
            comm.push(o.comm);
            platform.push(o.platform);
            instance.push(o.instance);
            role.push(o.role);
        }
        vec![
            u32::column("pid", pid),
            String::column("comm", comm),
            String::column("platform", platform),
            String::column("instance", instance),
            String::column("role", role),
        ]
    }

    fn read(df: &DataFrame, _field: &str) -> Result<Vec<Self>, ColumnError> {
        let pid = <u32 as ColumnValue>::read(df, "pid")?;
        let comm = <String as ColumnValue>::read(df, "comm")?;
        let platform = <String as ColumnValue>::read(df, "platform")?;
        let instance = <String as ColumnValue>::read(df, "instance")?;
        let role = <String as ColumnValue>::read(df, "role")?;
        Ok(pid
            .into_iter()
            .zip(comm)
            .zip(platform)
            .zip(instance)
            .zip(role)
            .map(|((((pid, comm), platform), instance), role)| Owner {
                pid,
                comm,
                platform,
                instance,
                role,
            })
            .collect())
    }
}
