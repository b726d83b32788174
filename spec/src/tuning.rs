//! What every tuning table shares: the GPU it was measured on ([`Device`]), the file it goes
//! by, the times it may hold, and the tables of plug-ins' own formats ([`PluginTable`]), which
//! the build and the registry carry as text. Any family's table format is `family_table`.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The folder, in the project and in the registry, that holds one table per device.
pub const TUNING_DIR: &str = "tuning";

/// Candidates within this fraction of the fastest count as tied with it; ties are ranked by
/// name (and a plug-in's own rule before it), never by their timing.
pub const NEAR_TIE: f64 = 0.02;

/// A GPU as tables tell them apart: by name, compute capability and SM count ([`Device::is`]);
/// its clocks say how it compares with another GPU of the same architecture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub name: String,
    /// [major, minor].
    pub capability: [u32; 2],
    pub sms: u32,
    /// Absent in tables written before they were recorded, and where the driver does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<Clocks>,
}

/// A GPU's peak rates as the driver reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocks {
    /// The SMs' peak clock.
    pub sm_mhz: u32,
    /// DRAM bandwidth: two transfers per memory clock over the bus width.
    pub memory_gbps: u32,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [major, minor] = self.capability;
        write!(f, "{} ({} SMs, compute capability {major}.{minor})", self.name, self.sms)
    }
}

impl Device {
    /// Whether `other` is the same kind of GPU, whose table applies as it is: same name,
    /// compute capability and SM count (clocks are not compared; they vary with settings).
    pub fn is(&self, other: &Device) -> bool {
        self.name == other.name && self.capability == other.capability && self.sms == other.sms
    }

    /// Of tables measured on the GPUs `device_of` gives, the one that stands for this GPU: its
    /// own (`true`); else that of a GPU of the same compute capability with the nearest SM
    /// count, then the nearest SM clock, then by name (`false`).
    pub fn table_in<'t, T>(&self, tables: &'t [T], device_of: impl Fn(&T) -> &Device) -> Option<(&'t T, bool)> {
        if let Some(own) = tables.iter().find(|t| device_of(t).is(self)) {
            return Some((own, true));
        }
        let clock = |d: &Device| d.clocks.map_or(0, |c| c.sm_mhz);
        let nearness = |d: &Device| (d.sms.abs_diff(self.sms), clock(d).abs_diff(clock(self)));
        tables
            .iter()
            .filter(|t| device_of(t).capability == self.capability)
            .min_by(|a, b| {
                let (a, b) = (device_of(a), device_of(b));
                nearness(a).cmp(&nearness(b)).then_with(|| a.name.cmp(&b.name))
            })
            .map(|t| (t, false))
    }

    /// The rules a table's device meets: a name, at least one SM, and clocks above 0 where
    /// recorded.
    pub fn check(&self) -> Result<(), String> {
        if self.name.trim().is_empty() || self.sms == 0 {
            return Err(format!("device `{self}` needs a name and at least one SM"));
        }
        if let Some(clocks) = self.clocks.filter(|c| c.sm_mhz == 0 || c.memory_gbps == 0) {
            return Err(format!(
                "device {self}: clocks of {} MHz and {} GB/s; a table records the GPU's clocks above 0, or none",
                clocks.sm_mhz, clocks.memory_gbps
            ));
        }
        Ok(())
    }
}

/// Whether a time in milliseconds is one a table may hold: within [`MIN_MS`]..=[`MAX_MS`].
pub fn valid_ms(ms: f64) -> bool {
    (MIN_MS..=MAX_MS).contains(&ms)
}

/// The times a table may hold, for messages.
pub fn valid_ms_words() -> String {
    format!("between {} and {} ms", show_ms(MIN_MS), show_ms(MAX_MS))
}

/// The shortest time a table may record: a nanosecond, below any kernel launch; shorter ones
/// (1e-300 ms) make ratios and their geometric means infinite.
pub const MIN_MS: f64 = 1e-6;
/// The longest: about three hours.
pub const MAX_MS: f64 = 1e7;

/// A time for a message: `1e-300`, not three hundred zeros.
pub fn show_ms(ms: f64) -> String {
    if ms != 0.0 && !(1e-3..1e7).contains(&ms.abs()) {
        format!("{ms:e}")
    } else {
        ms.to_string()
    }
}

/// The file name a device's table goes by: its name with anything but letters and digits
/// made `_`, and its SM count (`NVIDIA_H200-132sm.json`).
pub fn file_name(device: &Device) -> String {
    let name: String = device.name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("{name}-{}sm.json", device.sms)
}

/// A table in the tuning folder itself (not in a family's folder): one of a plug-in's own
/// format (a dispatcher plug-in's), carried by the build and the registry as text; the plug-in
/// reads and checks it.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginTable {
    /// Where it came from, for messages.
    pub path: PathBuf,
    pub text: std::sync::Arc<str>,
}

impl PluginTable {
    /// The plug-in tables of a tuning folder ([`paths`]), as text.
    pub fn read_all(dir: &Path) -> Result<Vec<PluginTable>, String> {
        let paths = paths(dir).map_err(|err| format!("cannot list {}: {err}", dir.display()))?;
        paths
            .into_iter()
            .map(|path| {
                let text = crate::files::read_to_string(&path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
                Ok(PluginTable { path, text: text.into() })
            })
            .collect()
    }

    /// What every table format states, read without knowing the format: the device (checked,
    /// and named by the file), and the variants it ranks (the `variant` of every entry's
    /// `ranked` list), so that a table naming variants a project lacks is found. A text that is
    /// not such a table is an error naming the file.
    pub fn outline(&self) -> Result<(Device, Vec<String>), String> {
        #[derive(Deserialize)]
        struct Outline {
            device: Device,
            entries: Vec<Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            ranked: Vec<Ranked>,
        }
        #[derive(Deserialize)]
        struct Ranked {
            variant: String,
        }
        let at = self.path.display();
        let outline: Outline = serde_json::from_str(&self.text)
            .map_err(|err| format!("{at}: not a tuning table (a device, and entries whose `ranked` lists name variants): {err}"))?;
        outline.device.check().map_err(|rule| format!("{at}: {rule}"))?;
        let expected = file_name(&outline.device);
        if self.path.file_name().is_some_and(|name| name.to_string_lossy() != expected) {
            return Err(format!(
                "{at}: the table is for {}, whose table is named {expected}; rename it or measure it again",
                outline.device
            ));
        }
        let mut variants: Vec<String> = outline.entries.into_iter().flat_map(|e| e.ranked).map(|r| r.variant).collect();
        variants.sort();
        variants.dedup();
        Ok((outline.device, variants))
    }
}

/// The tables in a tuning folder itself: its `*.json` files, in name order; none where the
/// folder does not exist. Something else by that name is an error.
pub fn paths(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    if !dir.is_dir() {
        return Err(std::io::Error::other(format!("{} is not a folder of tuning tables", dir.display())));
    }
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "json") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_is_its_name_capability_and_sms_whatever_its_clocks() {
        let h100 = Device { name: "NVIDIA H100 80GB HBM3".into(), capability: [9, 0], sms: 132, clocks: None };
        let clocked = Device { clocks: Some(Clocks { sm_mhz: 1980, memory_gbps: 3352 }), ..h100.clone() };
        assert!(h100.is(&clocked) && clocked.is(&h100));
        assert!(!h100.is(&Device { sms: 114, ..h100.clone() }));
        // Tables written before clocks were recorded read as devices without them.
        let old: Device = serde_json::from_str(r#"{"name": "NVIDIA H100 80GB HBM3", "capability": [9, 0], "sms": 132}"#).unwrap();
        assert_eq!(old, h100);
        let text = serde_json::to_string(&clocked).unwrap();
        assert_eq!(serde_json::from_str::<Device>(&text).unwrap(), clocked);
    }

    #[test]
    fn a_plugin_table_outline_is_its_device_and_ranked_variants() {
        let text = r#"{"device": {"name": "GPU", "capability": [9, 0], "sms": 132}, "entries": [{"ranked": [{"variant": "b"}, {"variant": "a"}]}, {"ranked": [{"variant": "a"}]}]}"#;
        let table = PluginTable { path: PathBuf::from("GPU-132sm.json"), text: text.into() };
        let (device, variants) = table.outline().unwrap();
        assert_eq!((device.sms, variants), (132, vec!["a".to_string(), "b".to_string()]));
        let misnamed = PluginTable { path: PathBuf::from("Other-1sm.json"), ..table.clone() };
        assert!(misnamed.outline().unwrap_err().contains("whose table is named GPU-132sm.json"));
        let shapeless = PluginTable { text: r#"{"device": 1}"#.into(), ..table };
        assert!(shapeless.outline().unwrap_err().contains("not a tuning table"));
    }
}
