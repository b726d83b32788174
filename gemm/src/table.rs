//! GEMM's entries in the one table format ([`FamilyTable`], `tuning/gemm/<GPU>-<SMs>sm.json`):
//! each entry's class states the layout and alignment of the calls it stands for and, for
//! entries of their own, the epilogue; each candidate run through moved operands states its
//! strategy. This module names those words and checks them; reading, ranking, distances and
//! estimates are the format's own (`tilesmith_spec::family_table`).

use crate::GemmShape;
use std::collections::BTreeMap;
use tilesmith_runtime::Buffer;
use tilesmith_spec::family_table::{FamilyEntry, FamilyTable, Timed};
use tilesmith_spec::tuning::Device;
use tilesmith_spec::Layout;

/// The family whose tables these are.
pub const FAMILY: &str = "gemm";
/// Its quantities, in declared order: what an entry's problem lists.
pub const QUANTITIES: [&str; 3] = ["m", "n", "k"];

/// Whether a call's operands suit TMA as they are: 16-byte-aligned starts and leading
/// dimensions that are multiples of 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Alignment {
    Aligned,
    Unaligned,
}

impl std::fmt::Display for Alignment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Alignment::Aligned => "aligned",
            Alignment::Unaligned => "unaligned",
        })
    }
}

/// How the dispatcher runs a variant for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// The variant on the caller's buffers.
    Direct,
    /// The operands that are not aligned are moved into aligned scratch with 128-byte rows by a
    /// transpose (which flips their storage order, so the variant's layout may differ from the
    /// call's); an unaligned C is computed transposed there and transposed into place.
    Padded,
}

impl Strategy {
    /// How a table states it: none for a direct run.
    pub fn word(self) -> Option<String> {
        match self {
            Strategy::Direct => None,
            Strategy::Padded => Some("padded".into()),
        }
    }

    /// The strategy a candidate was timed with.
    pub fn of(timed: &Timed) -> Result<Strategy, String> {
        match timed.strategy.as_deref() {
            None => Ok(Strategy::Direct),
            Some("padded") => Ok(Strategy::Padded),
            Some(other) => Err(format!("{} has strategy `{other}`; GEMM's are direct (none stated) and `padded`", timed.variant)),
        }
    }
}

/// The class of GEMM calls of this layout and alignment, measured with this epilogue's
/// activation (none: plain calls, whose entries stand for every epilogue without its own).
pub fn class(layout: Layout, alignment: Alignment, epilogue: Option<&str>) -> BTreeMap<String, String> {
    let mut class = BTreeMap::from([("layout".to_string(), layout.as_str().to_string()), ("alignment".to_string(), alignment.to_string())]);
    if let Some(epilogue) = epilogue {
        class.insert("epilogue".into(), epilogue.to_string());
    }
    class
}

/// A batch of `batch` problems [M, N, K] as messages write it: `MxNxK`, or `B x MxNxK`.
pub fn describe(batch: u64, problem: &[u64]) -> String {
    let problems = if batch == 1 { String::new() } else { format!("{batch} x ") };
    problems + &problem.iter().map(u64::to_string).collect::<Vec<_>>().join("x")
}

/// An empty GEMM table of `device`.
pub fn new_table(device: Device, compiler: String) -> FamilyTable {
    FamilyTable::new(FAMILY, device, compiler, QUANTITIES.iter().map(|q| q.to_string()).collect())
}

/// An entry's class read back: its layout, alignment and epilogue (none: plain).
pub fn class_of(entry: &FamilyEntry) -> Result<(Layout, Alignment, Option<&str>), String> {
    let word = |name: &str| entry.class.get(name).map(String::as_str);
    let alignment = match word("alignment") {
        Some("aligned") => Some(Alignment::Aligned),
        Some("unaligned") => Some(Alignment::Unaligned),
        _ => None,
    };
    match (word("layout").and_then(Layout::parse), alignment) {
        (Some(layout), Some(alignment)) => Ok((layout, alignment, word("epilogue"))),
        _ => Err(format!("its class {:?} needs a layout (nn, nt, tn or tt) and an alignment (aligned or unaligned)", entry.class)),
    }
}

/// The call an entry stands for, as `tilesmith tune` timed it: its problem in its class's
/// layout, packed, or with odd leading dimensions where its class is unaligned and packed ones
/// would be aligned; a batch's problems one after another.
pub fn entry_shape(entry: &FamilyEntry) -> Result<GemmShape, String> {
    let (layout, alignment, _) = class_of(entry)?;
    let &[m, n, k] = entry.problem.as_slice() else { return Err(format!("problem {:?} is not [M, N, K]", entry.problem)) };
    let [m, n, k] = [m, n, k].map(|d| d as usize);
    let packed = GemmShape::packed(m, n, k, layout);
    let packed_class = crate::dispatch::alignment(entry.dtype, &packed, &Buffer::unallocated(packed.spans()));
    let odd_ld = alignment == Alignment::Unaligned && packed_class == Alignment::Aligned;
    Ok(GemmShape::tuned(entry.batch as usize, [m, n, k], layout, odd_ld))
}

/// The build's check of a table (`compile::Options::table_checks`), and the dispatcher's when it
/// reads one: GEMM's states problems of `m`, `n` and `k`, each entry's class a layout and an
/// alignment (and an activation of the `epilogue` axis, for entries of their own), and its
/// strategies direct (none stated) or `padded`. Other families' tables pass; the rest (times,
/// rank order, one entry per problem) is [`FamilyTable::check`]'s.
pub fn check_table(table: &FamilyTable) -> Result<(), String> {
    if table.family != FAMILY {
        return Ok(());
    }
    if table.quantities != QUANTITIES {
        return Err(format!("a table of family `{FAMILY}` measures problems of {QUANTITIES:?}, not {:?}", table.quantities));
    }
    for (index, entry) in table.entries.iter().enumerate() {
        let at = format!("entry {} ({} x {:?} {})", index + 1, entry.batch, entry.problem, entry.dtype);
        let (_, _, epilogue) = class_of(entry).map_err(|rule| format!("{at}: {rule}"))?;
        if let Some(other) = entry.class.keys().find(|k| !["layout", "alignment", "epilogue"].contains(&k.as_str())) {
            return Err(format!("{at}: its class names `{other}`; GEMM's entries state a layout, an alignment and an epilogue"));
        }
        if let Some(word) = epilogue {
            if crate::Activation::named(word).map_err(|rule| format!("{at}: {rule}"))? == crate::Activation::NONE {
                return Err(format!("{at}: epilogue `{word}` applies no activation; its calls read the plain entries"));
            }
        }
        for timed in &entry.ranked {
            Strategy::of(timed).map_err(|rule| format!("{at}: {rule}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A GEMM table of one entry (4096³ bf16) with this class and strategy, as text.
    fn family_text(class: &str, strategy: &str) -> String {
        format!(
            r#"{{"format": 1, "family": "gemm", "device": {{"name": "GPU", "capability": [9, 0], "sms": 132}}, "compiler": "",
            "quantities": ["m", "n", "k"], "entries": [{{"dtype": "bf16", "class": {class}, "problem": [4096, 4096, 4096],
            "baseline_ms": 1.0, "ranked": [{{"variant": "gemm_tn_128x128x32"{strategy}, "ms": 0.9}}]}}]}}"#
        )
    }

    #[test]
    fn nonsense_tables_are_refused_in_words() {
        let path = Path::new("tuning/gemm/GPU-132sm.json");
        let read = |text: String| FamilyTable::parse(&text, path).and_then(|t| check_table(&t));
        let class = r#"{"layout": "tn", "alignment": "aligned"}"#;
        assert_eq!(read(family_text(class, "")), Ok(()));
        assert_eq!(read(family_text(class, r#", "strategy": "padded""#)), Ok(()));
        let strategy = read(family_text(class, r#", "strategy": "sideways""#)).unwrap_err();
        assert!(
            strategy.contains("gemm_tn_128x128x32 has strategy `sideways`; GEMM's are direct (none stated) and `padded`"),
            "{strategy}"
        );
        let no_layout = read(family_text(r#"{"alignment": "aligned"}"#, "")).unwrap_err();
        assert!(
            no_layout.contains("entry 1 (1 x [4096, 4096, 4096] bf16): its class") && no_layout.contains("needs a layout"),
            "{no_layout}"
        );
        let extra = read(family_text(r#"{"layout": "tn", "alignment": "aligned", "swizzle": "x"}"#, "")).unwrap_err();
        assert!(extra.contains("its class names `swizzle`"), "{extra}");
        let epilogue = read(family_text(r#"{"layout": "tn", "alignment": "aligned", "epilogue": "linear"}"#, "")).unwrap_err();
        assert!(epilogue.contains("epilogue `linear` applies no activation; its calls read the plain entries"), "{epilogue}");
        let mut other = FamilyTable::parse(&family_text(class, ""), path).unwrap();
        other.quantities = vec!["m".into(), "n".into()];
        assert!(check_table(&other).unwrap_err().contains("measures problems of [\"m\", \"n\", \"k\"], not [\"m\", \"n\"]"));
        other.family = "softmax".into();
        assert_eq!(check_table(&other), Ok(()), "other families' tables are not GEMM's to check");
    }

    #[test]
    fn a_class_reads_back_as_written() {
        let plain = class(Layout::Tn, Alignment::Unaligned, None);
        let gelu = class(Layout::Nt, Alignment::Aligned, Some("gelu_tanh"));
        let entry = |class| FamilyEntry {
            dtype: tilesmith_spec::Dtype::Bf16,
            class,
            problem: vec![1, 2, 3],
            batch: 1,
            baseline_ms: 1.0,
            ranked: vec![],
        };
        assert_eq!(class_of(&entry(plain)), Ok((Layout::Tn, Alignment::Unaligned, None)));
        assert_eq!(class_of(&entry(gelu)), Ok((Layout::Nt, Alignment::Aligned, Some("gelu_tanh"))));
        let padded = Timed { variant: "v".into(), strategy: Strategy::Padded.word(), ms: 1.0, source: None };
        assert_eq!(Strategy::of(&padded), Ok(Strategy::Padded));
    }
}
