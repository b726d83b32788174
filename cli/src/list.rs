//! `tilesmith list`: the variants, their axes and, once built, their resources.

use anyhow::{bail, Result};
use std::collections::BTreeMap;
use tilesmith_build::gen::expand;
use tilesmith_build::Project;
use tilesmith_build::Selection;
use tilesmith_spec::manifest::{self, MANIFEST_FILE};
use tilesmith_spec::{Built, Registry};

pub fn run(project: &Project, selection: &Selection) -> Result<()> {
    let rendered = expand(project)?;
    let index = project.registry_dir().join(MANIFEST_FILE);
    let built: BTreeMap<String, Built> = match manifest::read::<Registry>(&index) {
        Ok(registry) => registry.variants.into_iter().map(|b| (b.entry.variant.name.clone(), b)).collect(),
        Err(_) if !index.exists() => BTreeMap::new(),
        Err(err) => bail!("{err}\n`tilesmith build --repair` rebuilds it from the per-variant records"),
    };

    // One column per axis name, in the order of the families' declarations; "-" where a
    // family lacks the axis.
    let mut columns: Vec<String> = Vec::new();
    for r in &rendered {
        for axis in r.entry.declaration.axes() {
            if !columns.contains(&axis.name) {
                columns.push(axis.name);
            }
        }
    }
    let mut header = vec!["variant"];
    header.extend(columns.iter().map(String::as_str));
    header.extend(["smem", "regs", "spills"]);
    let mut rows = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for r in rendered.iter().filter(|r| selection.matches(&r.entry.variant.name)) {
        let v = &r.entry.variant;
        let (regs, spills) = match built.get(&v.name).filter(|b| b.entry == r.entry) {
            Some(b) => (
                b.resources.iter().map(|res| format!("{}:{}", res.arch, res.registers)).collect::<Vec<_>>().join(" "),
                if b.spills() { "yes".into() } else { "no".into() },
            ),
            None => ("not built".into(), "-".into()),
        };
        let mut row = vec![v.name.clone()];
        row.extend(columns.iter().map(|axis| v.value(axis).map_or_else(|| "-".to_string(), |value| value.to_string())));
        row.extend([r.entry.launch.dynamic_smem_bytes.to_string(), regs, spills]);
        rows.push(row);
    }
    if rows.len() == 1 {
        bail!("no declared variant matches the given globs");
    }
    let widths: Vec<usize> = (0..header.len()).map(|c| rows.iter().map(|row| row[c].len()).max().unwrap_or(0)).collect();
    for row in &rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
    println!("{} variant(s)", rows.len() - 1);
    Ok(())
}
