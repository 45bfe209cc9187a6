//! `vtrace report --format json`: every section's fields, under the names
//! documented in docs/recording-schema.md ("Report JSON"), and `metrics`,
//! every section's headline figures with their unit and dimensions.

use serde_json::{Map, Value};

use super::model::Section;

pub fn document(sections: &[Section]) -> Value {
    let mut doc = Map::new();
    for s in sections {
        for (key, value) in &s.json {
            doc.insert(key.to_string(), value.clone());
        }
    }
    let metrics: Vec<_> = sections.iter().flat_map(|s| &s.metrics).collect();
    doc.insert(
        "metrics".into(),
        serde_json::to_value(metrics).expect("metrics serialize"),
    );
    Value::Object(doc)
}
