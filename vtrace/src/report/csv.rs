//! `vtrace report --format csv`: one row per thread, or any table of the
//! recording (`--table NAME`), whatever layer wrote it.

use polars_core::prelude::AnyValue;

use crate::{Error, Result, recording::Recording, views::quote};

/// Table `name` of the recording as CSV, a header of its column names first.
pub fn table(rec: &Recording, name: &str) -> Result<String> {
    let table = rec.tables.get(name).ok_or_else(|| {
        let known: Vec<&str> = rec.tables.iter().map(|t| t.name()).collect();
        Error::BadArgument(format!(
            "this recording has no table '{name}': it has {}",
            known.join(", ")
        ))
    })?;
    let df = table.frame().map_err(|e| Error::Table {
        table: table.name(),
        reason: e.to_string(),
    })?;
    let columns = df.columns();
    let mut out: String = columns.iter().map(|c| quote(c.name())).collect::<Vec<_>>().join(",");
    out.push('\n');
    for i in 0..df.height() {
        let fields: Vec<String> = columns
            .iter()
            .map(|c| match c.get(i) {
                Ok(AnyValue::String(s)) => quote(s),
                Ok(AnyValue::StringOwned(s)) => quote(&s),
                Ok(AnyValue::Null) | Err(_) => String::new(),
                Ok(v) => v.to_string(),
            })
            .collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    Ok(out)
}
