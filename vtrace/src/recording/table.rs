//! Row structs <-> polars DataFrames <-> Parquet files.

use polars::prelude::*;

/// A recording table: a Vec of rows stored as one Parquet file.
pub trait Table: Sized {
    const NAME: &'static str;
    fn to_frame(rows: &[Self]) -> PolarsResult<DataFrame>;
    fn from_frame(df: &DataFrame) -> Result<Vec<Self>, String>;
    fn file_name() -> String {
        format!("{}.parquet", Self::NAME)
    }
}

/// A column type a table may use.
pub trait ColumnValue: Sized + Clone {
    fn column(name: &str, values: Vec<Self>) -> Column;
    fn read(df: &DataFrame, name: &str) -> Result<Vec<Self>, String>;
}

fn col<'a>(df: &'a DataFrame, name: &str) -> Result<&'a Column, String> {
    df.column(name).map_err(|_| format!("column '{name}' missing"))
}

macro_rules! column_value {
    ($ty:ty, $accessor:ident) => {
        impl ColumnValue for $ty {
            fn column(name: &str, values: Vec<Self>) -> Column {
                Column::new(name.into(), values)
            }
            fn read(df: &DataFrame, name: &str) -> Result<Vec<Self>, String> {
                col(df, name)?
                    .$accessor()
                    .map_err(|e| format!("column '{name}': {e}"))?
                    .iter()
                    .map(|v| v.ok_or_else(|| format!("column '{name}' has nulls")))
                    .collect()
            }
        }
    };
}
column_value!(u64, u64);
column_value!(u32, u32);
column_value!(f64, f64);
column_value!(bool, bool);

impl ColumnValue for String {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn read(df: &DataFrame, name: &str) -> Result<Vec<Self>, String> {
        col(df, name)?
            .str()
            .map_err(|e| format!("column '{name}': {e}"))?
            .iter()
            .map(|v| {
                v.map(str::to_string)
                    .ok_or_else(|| format!("column '{name}' has nulls"))
            })
            .collect()
    }
}

/// Declares a row struct and its table mapping in one place, so the Rust
/// fields, the Parquet columns and their order cannot drift apart.
macro_rules! table {
    ($(#[$meta:meta])* $name:ident = $table:literal { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $name { $($(#[$fmeta])* pub $field: $ty),* }

        impl $crate::recording::Table for $name {
            const NAME: &'static str = $table;
            fn to_frame(rows: &[Self]) -> polars::prelude::PolarsResult<polars::prelude::DataFrame> {
                use $crate::recording::table::ColumnValue;
                polars::prelude::DataFrame::new(rows.len(), vec![$(
                    <$ty as ColumnValue>::column(stringify!($field), rows.iter().map(|r| r.$field.clone()).collect()),
                )*])
            }
            fn from_frame(df: &polars::prelude::DataFrame) -> Result<Vec<Self>, String> {
                use $crate::recording::table::ColumnValue;
                $(let $field = <$ty as ColumnValue>::read(df, stringify!($field))?;)*
                let mut rows = Vec::with_capacity(df.height());
                for i in 0..df.height() {
                    rows.push($name { $($field: $field[i].clone()),* });
                }
                Ok(rows)
            }
        }
    };
}
pub(crate) use table;
