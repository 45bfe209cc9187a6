//! Row structs <-> polars DataFrames <-> Parquet files.

use std::any::Any;

use polars_core::prelude::*;

/// A recording table: a Vec of rows stored as one Parquet file (and as
/// JSON in a journal's checkpoint).
pub trait Table: Sized + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static {
    const NAME: &'static str;
    /// Bumped when the table's columns change; the manifest in meta.json
    /// records it, and a reader refuses versions newer than its own.
    const VERSION: u32 = 1;
    fn to_frame(rows: &[Self]) -> PolarsResult<DataFrame>;
    /// Rows of a frame written as table version `version` (at most [`Self::VERSION`]).
    fn from_frame(df: &DataFrame, version: u32) -> Result<Vec<Self>, ColumnError>;
}

/// A table held by a [`TableSet`], whatever its row type.
pub trait StoredTable: Any + Send + Sync {
    fn name(&self) -> &'static str;
    fn version(&self) -> u32;
    fn frame(&self) -> PolarsResult<DataFrame>;
    /// Its rows as a JSON array.
    fn json(&self) -> serde_json::Value;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn as_any(&self) -> &dyn Any;
}

impl<T: Table> StoredTable for Vec<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn version(&self) -> u32 {
        T::VERSION
    }
    fn frame(&self) -> PolarsResult<DataFrame> {
        T::to_frame(self)
    }
    fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("rows serialize")
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Reads a frame written as the given version of a table.
pub type ReadTable = fn(&DataFrame, u32) -> Result<Box<dyn StoredTable>, ColumnError>;

/// How to read one kind of table back: declared by the layer that writes it.
#[derive(Clone, Copy)]
pub struct TableKind {
    pub name: &'static str,
    pub version: u32,
    /// Reads a frame written as the given version of the table.
    pub read: ReadTable,
    /// Reads rows written as JSON by this vtrace ([`StoredTable::json`]).
    pub read_json: fn(serde_json::Value) -> Result<Box<dyn StoredTable>, serde_json::Error>,
}

impl TableKind {
    pub fn of<T: Table>() -> TableKind {
        TableKind {
            name: T::NAME,
            version: T::VERSION,
            read: |df, version| Ok(Box::new(T::from_frame(df, version)?)),
            read_json: |value| Ok(Box::new(serde_json::from_value::<Vec<T>>(value)?)),
        }
    }
}

/// The tables of a recording, keyed by name: a layer adds its own without
/// any field in [`super::Recording`] for it.
#[derive(Default)]
pub struct TableSet {
    tables: std::collections::BTreeMap<&'static str, Box<dyn StoredTable>>,
}

impl std::fmt::Debug for TableSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tables.keys()).finish()
    }
}

impl TableSet {
    /// Adds (or replaces) table `T`.
    pub fn put<T: Table>(&mut self, rows: Vec<T>) {
        self.tables.insert(T::NAME, Box::new(rows));
    }

    pub fn insert(&mut self, table: Box<dyn StoredTable>) {
        self.tables.insert(table.name(), table);
    }

    /// The rows of table `T`; empty when absent.
    pub fn rows<T: Table>(&self) -> &[T] {
        self.tables
            .get(T::NAME)
            .and_then(|t| t.as_any().downcast_ref::<Vec<T>>())
            .map_or(&[], Vec::as_slice)
    }

    /// The table named `name`, whatever its row type.
    pub fn get(&self, name: &str) -> Option<&dyn StoredTable> {
        self.tables.get(name).map(|t| t.as_ref())
    }

    pub fn iter(&self) -> impl Iterator<Item = &dyn StoredTable> {
        self.tables.values().map(|t| t.as_ref())
    }

    /// Moves every table of `other` in.
    pub fn extend(&mut self, other: TableSet) {
        self.tables.extend(other.tables);
    }
}

/// Why a table's Parquet file does not read as its rows.
#[derive(Debug, thiserror::Error)]
pub enum ColumnError {
    #[error("column '{0}' missing")]
    Missing(String),
    #[error("column '{column}' has the wrong type: {reason}")]
    WrongType { column: String, reason: String },
    #[error("column '{0}' has nulls")]
    Nulls(String),
}

/// A column type a table may use.
pub trait ColumnValue: Sized + Clone {
    fn column(name: &str, values: Vec<Self>) -> Column;
    fn read(df: &DataFrame, name: &str) -> Result<Vec<Self>, ColumnError>;
}

/// A row field's columns: one column named after the field for a
/// [`ColumnValue`], a column each of its own fields for a record flattened
/// into the row (see [`super::Owner`]).
pub trait Columns: Sized + Clone + Default {
    fn columns(field: &str, values: Vec<Self>) -> Vec<Column>;
    fn read(df: &DataFrame, field: &str) -> Result<Vec<Self>, ColumnError>;
}

impl<T: ColumnValue + Default> Columns for T {
    fn columns(field: &str, values: Vec<Self>) -> Vec<Column> {
        vec![T::column(field, values)]
    }
    fn read(df: &DataFrame, field: &str) -> Result<Vec<Self>, ColumnError> {
        <T as ColumnValue>::read(df, field)
    }
}

fn col<'a>(df: &'a DataFrame, name: &str) -> Result<&'a Column, ColumnError> {
    df.column(name).map_err(|_| ColumnError::Missing(name.into()))
}

fn wrong_type(name: &str) -> impl FnOnce(PolarsError) -> ColumnError + '_ {
    move |e| ColumnError::WrongType {
        column: name.into(),
        reason: e.to_string(),
    }
}

macro_rules! column_value {
    ($ty:ty, $accessor:ident) => {
        impl ColumnValue for $ty {
            fn column(name: &str, values: Vec<Self>) -> Column {
                Column::new(name.into(), values)
            }
            fn read(df: &DataFrame, name: &str) -> Result<Vec<Self>, ColumnError> {
                col(df, name)?
                    .$accessor()
                    .map_err(wrong_type(name))?
                    .iter()
                    .map(|v| v.ok_or_else(|| ColumnError::Nulls(name.into())))
                    .collect()
            }
        }
    };
}
column_value!(u64, u64);
column_value!(u32, u32);
column_value!(i32, i32);
column_value!(f64, f64);
column_value!(bool, bool);

impl ColumnValue for String {
    fn column(name: &str, values: Vec<Self>) -> Column {
        Column::new(name.into(), values)
    }
    fn read(df: &DataFrame, name: &str) -> Result<Vec<Self>, ColumnError> {
        col(df, name)?
            .str()
            .map_err(wrong_type(name))?
            .iter()
            .map(|v| v.map(str::to_string).ok_or_else(|| ColumnError::Nulls(name.into())))
            .collect()
    }
}

/// Declares a row struct and its table mapping in one place, so the Rust
/// fields, the Parquet columns and their order cannot drift apart.
/// `Name = "file" version N { ... }` bumps the table's version; a column
/// added in version N is declared `field: Type [since N]` and reads as its
/// default from files of an older version. A record whose fields are
/// columns of their own ([`super::Owner`]) is declared
/// `#[serde(flatten)] owner: Owner`.
macro_rules! table {
    ($(#[$meta:meta])* $name:ident = $table:literal $(version $version:literal)? {
        $($(#[$fmeta:meta])* $field:ident : $ty:ty $([since $since:literal])?),* $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $name { $($(#[$fmeta])* pub $field: $ty),* }

        impl $crate::recording::Table for $name {
            const NAME: &'static str = $table;
            $(const VERSION: u32 = $version;)?
            fn to_frame(rows: &[Self]) -> polars_core::prelude::PolarsResult<polars_core::prelude::DataFrame> {
                use $crate::recording::table::Columns;
                let mut columns = Vec::new();
                $(
                    columns.extend(<$ty as Columns>::columns(stringify!($field), rows.iter().map(|r| r.$field.clone()).collect()));
                )*
                polars_core::prelude::DataFrame::new(rows.len(), columns)
            }
            fn from_frame(
                df: &polars_core::prelude::DataFrame,
                version: u32,
            ) -> Result<Vec<Self>, $crate::recording::table::ColumnError> {
                use $crate::recording::table::Columns;
                $(
                    let since: u32 = 1 $(+ $since - 1)?;
                    let $field = if version < since {
                        vec![<$ty>::default(); df.height()]
                    } else {
                        <$ty as Columns>::read(df, stringify!($field))?
                    };
                )*
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
