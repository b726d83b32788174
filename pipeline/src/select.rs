//! `--kernels GLOB`: which variants a command works on.

use anyhow::{Context, Result};
use globset::{Glob, GlobSet, GlobSetBuilder};

/// Variant names matching any of the given globs; everything when none is given.
pub struct Selection {
    globs: Option<GlobSet>,
}

impl Selection {
    pub fn new(patterns: &[String]) -> Result<Selection> {
        if patterns.is_empty() {
            return Ok(Selection { globs: None });
        }
        let mut builder = GlobSetBuilder::new();
        for pattern in patterns {
            builder.add(Glob::new(pattern).with_context(|| format!("--kernels `{pattern}` is not a valid glob"))?);
        }
        Ok(Selection { globs: Some(builder.build()?) })
    }

    pub fn matches(&self, name: &str) -> bool {
        self.globs.as_ref().is_none_or(|globs| globs.is_match(name))
    }
}
