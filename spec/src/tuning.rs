//! What every tuning table shares: the GPU it was measured on ([`Device`]), the file it goes
//! by and the times it may hold. The table format itself is `family_table`.

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

/// The `*.json` files in a tuning folder itself, in name order (tables lie in a folder per
/// family, so these are misplaced); none where the folder does not exist.
/// Something else by that name is an error.
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
}
