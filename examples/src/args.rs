//! The flags every example takes: `--name value`, looked up by name.

use std::str::FromStr;

pub struct Args(Vec<String>);

impl Args {
    pub fn from_env() -> Self {
        Args(std::env::args().collect())
    }

    /// The word after `flag`.
    pub fn value(&self, flag: &str) -> Option<String> {
        self.0
            .iter()
            .position(|a| a == flag)
            .and_then(|i| self.0.get(i + 1))
            .cloned()
    }

    /// The number after `flag`, if given (a word that is not one panics, naming the flag).
    pub fn num_opt<T: FromStr>(&self, flag: &str) -> Option<T> {
        self.value(flag)
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{flag} takes a number, not {v}")))
    }

    /// The number after `flag`, or `default`.
    pub fn num<T: FromStr>(&self, flag: &str, default: T) -> T {
        self.num_opt(flag).unwrap_or(default)
    }
}
