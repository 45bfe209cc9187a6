//! The module-load workload: a generated tree of small Node.js packages
//! (each a `package.json`, an `index.js` and a `lib.js` it requires) and an
//! entry script that requires them all and prints how long that took, as
//! the studies' Node.js start-up did. Run by real `node` inside the
//! instance, from the lab volume (a host directory bind-mounted into it).

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::{Result, error::io};

/// The line the entry script prints: `vtrace-modules: loaded N modules in X ms`.
pub const MARK: &str = "vtrace-modules: loaded ";

/// The tree of `n` packages under `root` (made once; kept between runs),
/// and the entry script's path relative to `root`.
pub fn ensure_tree(root: &Path, n: u32) -> Result<PathBuf> {
    let dir = root.join(format!("modules-{n}"));
    let entry = dir.join("index.js");
    if entry.is_file() {
        return Ok(PathBuf::from(format!("modules-{n}/index.js")));
    }
    for i in 0..n {
        let m = dir.join("node_modules").join(format!("m{i}"));
        fs::create_dir_all(&m).map_err(io(format!("create {}", m.display())))?;
        let files = [
            (
                "package.json",
                format!("{{\"name\": \"m{i}\", \"version\": \"1.0.0\", \"main\": \"index.js\"}}\n"),
            ),
            (
                "index.js",
                format!("const lib = require('./lib');\nmodule.exports = {{ value: lib.base + {i} }};\n"),
            ),
            ("lib.js", format!("// package m{i}\nmodule.exports = {{ base: 1 }};\n")),
        ];
        for (name, text) in files {
            fs::write(m.join(name), text).map_err(io(format!("write {}", m.join(name).display())))?;
        }
    }
    let script = format!(
        "const t0 = process.hrtime.bigint();\nlet sum = 0;\n\
         for (let i = 0; i < {n}; i++) sum += require('m' + i).value;\n\
         const ms = Number(process.hrtime.bigint() - t0) / 1e6;\n\
         console.log(`{MARK}{n} modules in ${{ms.toFixed(3)}} ms (${{sum}})`);\n"
    );
    // Written last: its presence says the tree is whole.
    fs::write(&entry, script).map_err(io(format!("write {}", entry.display())))?;
    Ok(PathBuf::from(format!("modules-{n}/index.js")))
}

/// (modules, milliseconds) from each entry script's line (one per loader
/// run at once).
pub fn parse(output: &str) -> Vec<(f64, f64)> {
    output
        .lines()
        .filter_map(|l| l.trim().strip_prefix(MARK))
        .filter_map(|line| {
            let (n, rest) = line.split_once(" modules in ")?;
            let ms = rest.split_whitespace().next()?;
            Some((n.parse().ok()?, ms.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_entry_scripts_line() {
        assert_eq!(
            super::parse("x\nvtrace-modules: loaded 500 modules in 123.456 ms (125250)\n"),
            vec![(500.0, 123.456)]
        );
        assert_eq!(
            super::parse(
                "vtrace-modules: loaded 100 modules in 200 ms (5050)\nvtrace-modules: loaded 100 modules in 250 ms (5050)\n"
            ),
            vec![(100.0, 200.0), (100.0, 250.0)]
        );
        assert!(super::parse("loaded").is_empty());
    }
}
