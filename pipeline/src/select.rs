//! `--kernels GLOB`: which variants a command works on.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use globset::{Glob, GlobSet, GlobSetBuilder};
use tilesmith_spec::Entry;

/// Variant names matching any of the given globs, and those added by name; everything when no
/// glob is given.
#[derive(Clone)]
pub struct Selection {
    patterns: Vec<String>,
    globs: Option<GlobSet>,
    also: BTreeSet<String>,
}

impl Selection {
    pub fn new(patterns: &[String]) -> Result<Selection> {
        if patterns.is_empty() {
            return Ok(Selection { patterns: Vec::new(), globs: None, also: BTreeSet::new() });
        }
        let mut builder = GlobSetBuilder::new();
        for pattern in patterns {
            builder.add(Glob::new(pattern).with_context(|| format!("--kernels `{pattern}` is not a valid glob"))?);
        }
        Ok(Selection { patterns: patterns.to_vec(), globs: Some(builder.build()?), also: BTreeSet::new() })
    }

    /// The globs it was made of.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    pub fn matches(&self, name: &str) -> bool {
        self.globs.as_ref().is_none_or(|globs| globs.is_match(name)) || self.also.contains(name)
    }

    /// With the reference variants among `entries` that the trials and bench check the selected
    /// ones with (in their dtype; in f32 too where the family's check counts units in the last
    /// place of the exact result), so that a registry of some variants can be tested and
    /// benchmarked; returns the names it added.
    pub fn add_references(&mut self, entries: &[Entry]) -> Vec<String> {
        let selected: Vec<&Entry> = entries.iter().filter(|e| !e.is_reference() && self.matches(&e.variant.name)).collect();
        let checks = |r: &Entry, e: &Entry| {
            let exact = e.exact_check().map(|(_, dtype)| dtype);
            [Some(e.variant.dtype), exact].into_iter().flatten().any(|dtype| r.is_reference_for(&e.variant, dtype))
        };
        let added: Vec<String> = entries
            .iter()
            .filter(|r| !self.matches(&r.variant.name) && selected.iter().any(|e| checks(r, e)))
            .map(|r| r.variant.name.clone())
            .collect();
        self.also.extend(added.iter().cloned());
        added
    }
}
