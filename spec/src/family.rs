//! A family's declaration: the interface every variant of it shares, as data. It is written as
//! `[<family>.family]` in variants.toml, copied into every manifest entry, and read by the build pipeline
//! (which checks each template's launch contract against it), by the runtime (which checks each
//! call against it) and by the trials (which make inputs, shapes, references and baselines from
//! it).

use crate::axes::{Axis, Bounds, Domain, Dtype, Naming, Value};
use crate::expr::Expr;
use crate::launch::Access;
use crate::rule::Rule;
use crate::variant::Variant;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// An operand as a call stores it: `rows` rows of `cols` elements, `ld` apart, and, for one
/// of more than two dimensions, `outer` (count, stride in elements) for each dimension before
/// those two, outermost first; `layout` says how, for messages (`row-major`, `column-major,
/// layout nn`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub rows: u64,
    pub cols: u64,
    pub ld: u64,
    pub outer: Vec<(u64, u64)>,
    pub layout: String,
}

/// Dimensions an operand may have: up to [batch, seq, heads, head_dim] and a few more.
pub const MAX_RANK: usize = 8;

/// What a family's calls take and compute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Family {
    /// The numbers that fix a call's shape (`m`, `n`, `k`; `rows`, `cols`); every kernel takes
    /// them all. Leading dimensions are quantities too, named by the operands' `ld`.
    pub quantities: Vec<String>,
    /// The quantity each edge of the `tile` axis tiles, in order; none: the family has no tile.
    #[serde(default)]
    pub tile: Vec<String>,
    /// The quantity that counts a call's problems (a strided batch): problem p reads and writes
    /// each operand with a `batch_stride` p strides on from its start, and shares the others. A
    /// call that leaves it out computes one problem; one that leaves a stride out gives 0 (every
    /// problem reads the same operand). None: calls are single problems.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// The family's own axes, beside the common ones (dtype, tile, backend, warps, bounds).
    #[serde(default)]
    pub axes: Vec<AxisDecl>,
    pub operands: Vec<OperandDecl>,
    #[serde(default)]
    pub scalars: Vec<ScalarDecl>,
    /// What every call's quantities keep beyond their operands' spans (`heads % kv_heads ==
    /// 0`): a call that breaks one is refused, naming it; the declared trial shapes must keep
    /// them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    pub work: Work,
    pub baseline: Baseline,
    pub reference: Reference,
    #[serde(default)]
    pub trials: Trials,
}

/// One of the family's own axes: words from a list, or counts in a range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisDecl {
    pub name: String,
    /// Its values as words; numbers (`values = [64, 128]`) are taken as their decimal text.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "words")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[u32; 2]>,
    /// Whether names show the axis always (`always`, before the tile) or where it differs from
    /// the family's default (`if_not_default`, after the warps).
    #[serde(default)]
    pub show: Show,
    /// Written before the value in names (`s` for stages: `s3`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// The family's default value, stated here instead of in `[<family>.defaults]`: for an
    /// axis whose default switches a feature off (`swap = "none"`, `cluster = 1`), so
    /// that variants.toml files that do not use it need not name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// The axis changes how a variant computes (its speed), not what: a row split over a
    /// cluster of 2 or 8 blocks. Trials compare such variants with the reference variant
    /// whatever its value of the axis.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tuning: bool,
}

/// A list of words, where a whole number stands for its decimal text.
fn words<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Vec::<Value>::deserialize(deserializer)?
        .into_iter()
        .map(|value| match value {
            Value::Word(word) => Ok(word),
            Value::Count(n) => Ok(n.to_string()),
            Value::Tile(_) => Err(serde::de::Error::custom("an axis's values are words or whole numbers, not lists")),
        })
        .collect()
}

impl AxisDecl {
    /// Its declared default; a number for an axis of words stands for its decimal text.
    pub fn default_value(&self) -> Option<Value> {
        match (&self.default, self.range) {
            (Some(Value::Count(n)), None) => Some(Value::Word(n.to_string())),
            (default, _) => default.clone(),
        }
    }

    /// Whether `value`, as a call writes it, is one of the axis's values.
    pub fn admits(&self, value: &str) -> bool {
        match self.range {
            Some([lo, hi]) => value.parse::<u32>().is_ok_and(|v| (lo..=hi).contains(&v)),
            None => self.values.iter().any(|v| v == value),
        }
    }

    /// Its values, as messages list them: `none, causal` or `1 to 16`.
    pub fn describe_values(&self) -> String {
        match self.range {
            Some([lo, hi]) => format!("{lo} to {hi}"),
            None => self.values.join(", "),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Show {
    Always,
    #[default]
    IfNotDefault,
}

/// A buffer a call passes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperandDecl {
    pub name: String,
    pub access: Access,
    /// Its sides as expressions of the quantities, outermost first: [length] of a vector,
    /// [rows, cols] of a matrix, [batch, seq, heads, head_dim] of a tensor (at most
    /// [`MAX_RANK`]); the last side is contiguous.
    pub dims: Vec<Expr>,
    /// The quantity that holds the distance between stored rows (matrices only): the same as
    /// `strides = [ld]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ld: Option<String>,
    /// The quantities that hold the elements between one index and the next of every side but
    /// the last (which is contiguous), outermost first: for operands of more than two sides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strides: Vec<String>,
    /// `axis[i]`: the operand is row-major where letter i of that axis's value is `t`, and
    /// column-major (stored rows are its columns) where it is `n` (BLAS's convention). None:
    /// row-major.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// A fixed element type; none: the variant's dtype.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<Dtype>,
    /// The family axis whose value is its element type: a dtype, or `in` ([`SAME_DTYPE`]) for
    /// the variant's (an `out` axis: C and its biases in bf16 from e4m3 inputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype_axis: Option<String>,
    /// The quantity that holds the elements between the operand of one problem of a batch and
    /// the next (the family's `batch`); none: every problem shares it (a bias).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_stride: Option<String>,
    /// Bytes its start must be aligned to, beyond an element and the variant's own rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub align: Option<u32>,
    /// A call may leave it out (a kernel then gets a null pointer), and a variant may not take
    /// it, refusing the calls that pass it: a bias, applied by epilogue variants only; an output
    /// some callers want (cross-entropy's log-sum-exp, kept for the backward pass). The trials
    /// run every variant once more with its optional outputs left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// What the trials fill it with, where it is read; none: uniform in [-1, 1) for floats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Values>,
    /// It holds cumulative offsets into other operands' sides (varlen attention's sequence
    /// starts): what a call's values must keep, which the runtime checks before each launch,
    /// and the trials draw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offsets: Option<Offsets>,
}

/// Cumulative offsets of `n` + 1 elements o: piece i of a packed side spans [o[i], o[i + 1]);
/// with `ends`, of `n` elements, each piece's end (piece 0 starts at 0: torch._grouped_mm's
/// `offs`). A call's offsets start at 0 or more, never decrease, end at `total` or less, and,
/// with `longest`, no piece is longer. A kernel indexes with them, so the runtime copies them
/// back and checks them before every launch (a synchronization of the stream); the trials draw
/// pieces of random lengths that fill `total` exactly (every one `longest` long where `total`
/// is `longest` times the pieces).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offsets {
    /// The elements of the side the pieces are packed along (`total_q`).
    pub total: Expr,
    /// The most elements one piece may have (`max_seq_q`), which a kernel's grid is sized by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest: Option<Expr>,
    /// The operand holds the pieces' ends only, one element a piece, the first piece starting
    /// at 0.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ends: bool,
}

impl Offsets {
    /// `total` and `longest` for a call with these quantities.
    pub fn bounds(&self, quantity: &dyn Fn(&str) -> Option<u64>) -> Result<(u64, Option<u64>), String> {
        let longest = match &self.longest {
            Some(expr) => Some(expr.eval(quantity)?),
            None => None,
        };
        Ok((self.total.eval(quantity)?, longest))
    }

    /// The pieces an operand of `elements` offsets holds.
    pub fn pieces(&self, elements: u64) -> u64 {
        if self.ends {
            elements
        } else {
            elements.saturating_sub(1)
        }
    }

    /// Whether `offsets` keep the rules, with `total` and `longest` evaluated (`ends` as the
    /// field); the first broken one names the operand (`name`), the elements and the rule.
    pub fn check(name: &str, offsets: &[i32], total: u64, longest: Option<u64>, ends: bool) -> Result<(), String> {
        if let Some(&first) = offsets.first().filter(|first| !ends && **first < 0) {
            return Err(format!("{name}[0] = {first}: offsets start at 0 or more"));
        }
        // Where each piece starts: the element before its end, or the implied 0.
        let label = |i: Option<usize>| i.map_or_else(|| String::from("the first piece's start"), |i| format!("{name}[{i}]"));
        let mut start = ends.then_some((None, 0));
        for (i, &end) in offsets.iter().enumerate() {
            if let Some((at, start)) = start {
                if end < start {
                    return Err(format!("{name}[{i}] = {end} is less than {} = {start}: offsets must not decrease", label(at)));
                }
                // Both at least 0 (the first is, and none decreases): the length fits a u64.
                let length = (i64::from(end) - i64::from(start)) as u64;
                if let Some(longest) = longest.filter(|&l| length > l) {
                    return Err(format!(
                        "{name}[{i}] - {} = {length}: a piece is longer than the {longest} elements the call gives as the longest",
                        label(at)
                    ));
                }
            }
            start = Some((Some(i), end));
        }
        match offsets.last() {
            Some(&last) if u64::try_from(last).is_ok_and(|last| last > total) => {
                Err(format!("{name}[{}] = {last} is past the end: offsets end at {total} or less", offsets.len() - 1))
            }
            _ => Ok(()),
        }
    }

    /// `pieces` random lengths of at most `longest` (none: any), filling `total` exactly, as
    /// offsets from 0; `uniform(lo, hi)` draws a whole number in [lo, hi]. `None` where they
    /// cannot fill it.
    pub fn draw(pieces: u64, total: u64, longest: Option<u64>, uniform: &mut dyn FnMut(u64, u64) -> u64) -> Option<Vec<u64>> {
        let cap = longest.unwrap_or(total);
        if pieces == 0 {
            return (total == 0).then(|| vec![0]);
        }
        if pieces.checked_mul(cap)? < total {
            return None;
        }
        // Each piece between what the rest can no longer take and what is left, in a random
        // order of the pieces.
        let mut lengths = Vec::with_capacity(pieces as usize);
        let mut left = total;
        for i in 0..pieces {
            let rest = (pieces - 1 - i) * cap;
            let length = uniform(left.saturating_sub(rest), left.min(cap));
            lengths.push(length);
            left -= length;
        }
        for i in (1..lengths.len()).rev() {
            let j = uniform(0, i as u64) as usize;
            lengths.swap(i, j);
        }
        let mut offsets = vec![0];
        offsets.extend(lengths.iter().scan(0, |end, l| {
            *end += l;
            Some(*end)
        }));
        Some(offsets)
    }
}

/// The values trials draw for an operand: one of `uniform = [lo, hi]`, `normal = [mean, std]`
/// or `integers = [lo, hi]` (whole numbers lo ≤ v < hi, expressions of the quantities), then,
/// optionally, a fraction of them replaced by an `ignore` value, and a fraction drawn
/// `outside` the integers' range (below lo or at hi and past it) so that the family's stated
/// handling of bad indices is checked against its reference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Values {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniform: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normal: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integers: Option<[Expr; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<f64>,
    /// The fraction of values that are `ignore`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_fraction: Option<f64>,
    /// The fraction of integers drawn outside their range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_fraction: Option<f64>,
}

/// One draw's law, with the call's quantities filled in: what [`Values::law`] gives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Law {
    Uniform {
        lo: f64,
        hi: f64,
    },
    Normal {
        mean: f64,
        std: f64,
    },
    /// Whole numbers lo ≤ v < hi.
    Integers {
        lo: f64,
        hi: f64,
    },
}

impl Values {
    /// The law of a call with these quantities, checked: a range that holds a value, within
    /// what `dtype` holds (an integer type holds its range, and `ignore` and values drawn
    /// outside too).
    pub fn law(&self, dtype: Dtype, quantity: &dyn Fn(&str) -> Option<u64>) -> Result<Law, String> {
        self.check()?;
        let law = match (self.uniform, self.normal, &self.integers) {
            (Some([lo, hi]), _, _) => Law::Uniform { lo, hi },
            (_, Some([mean, std]), _) => Law::Normal { mean, std },
            (_, _, Some([lo, hi])) => Law::Integers { lo: lo.eval(quantity)? as f64, hi: hi.eval(quantity)? as f64 },
            _ => return Err("give one of `uniform = [lo, hi]`, `normal = [mean, std]` or `integers = [lo, hi]`".into()),
        };
        match law {
            Law::Uniform { lo, hi } | Law::Integers { lo, hi } if !(lo.is_finite() && hi.is_finite() && lo < hi) => {
                return Err(format!("the range [{lo}, {hi}) holds no value: lo must be below hi, both finite"));
            }
            Law::Normal { mean, std } if !(mean.is_finite() && std.is_finite() && std > 0.0) => {
                return Err(format!("normal = [{mean}, {std}]: the mean is finite and the deviation finite and above 0"));
            }
            _ => {}
        }
        if let Some((min, max)) = dtype.integer_range() {
            let (lo, hi) = match law {
                Law::Integers { lo, hi } if self.outside_fraction.is_some() => (lo - 1.0, hi),
                Law::Integers { lo, hi } | Law::Uniform { lo, hi } => (lo, hi - 1.0),
                Law::Normal { .. } => return Err(format!("{dtype} holds whole numbers: draw them with `integers` or `uniform`")),
            };
            for value in [lo.ceil(), hi.floor()].into_iter().chain(self.ignore) {
                if !(min..=max).contains(&value) || value.fract() != 0.0 {
                    return Err(format!("{value} is not a value of {dtype} ({min} to {max})"));
                }
            }
        }
        Ok(law)
    }

    /// The rules that need no quantities: one law, fractions in [0, 1], `ignore` with its
    /// fraction, `outside_fraction` with `integers`.
    pub fn check(&self) -> Result<(), String> {
        let laws = [self.uniform.is_some(), self.normal.is_some(), self.integers.is_some()];
        if laws.iter().filter(|given| **given).count() != 1 {
            return Err("give one of `uniform = [lo, hi]`, `normal = [mean, std]` or `integers = [lo, hi]`".into());
        }
        for (what, fraction) in [("ignore_fraction", self.ignore_fraction), ("outside_fraction", self.outside_fraction)] {
            if fraction.is_some_and(|f| !(0.0..=1.0).contains(&f)) {
                return Err(format!("{what} must lie in [0, 1]"));
            }
        }
        if self.ignore.is_some() != self.ignore_fraction.is_some() {
            return Err("`ignore` and `ignore_fraction` go together".into());
        }
        if self.outside_fraction.is_some() && self.integers.is_none() {
            return Err("`outside_fraction` draws integers outside their range: it needs `integers`".into());
        }
        Ok(())
    }
}

impl OperandDecl {
    /// The quantities that hold its strides, outermost first: its `ld`, or its `strides`.
    pub fn stride_names(&self) -> impl Iterator<Item = &str> {
        self.ld.as_deref().into_iter().chain(self.strides.iter().map(String::as_str))
    }
}

/// A number a call passes by value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalarDecl {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ScalarType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The value trials pass; none: the default, else the middle of the range (0 where it
    /// has no range).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<f64>,
    /// The value a call that leaves it out means. A variant may not take a scalar with a
    /// default, and then refuses calls that pass another value (α and β of a matrix product).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScalarType {
    F32,
    F64,
    I32,
    U32,
}

impl ScalarType {
    /// Bytes a kernel parameter of this type takes.
    pub fn size_bytes(self) -> u32 {
        match self {
            ScalarType::F64 => 8,
            ScalarType::F32 | ScalarType::I32 | ScalarType::U32 => 4,
        }
    }

    pub fn cuda_type(self) -> &'static str {
        match self {
            ScalarType::F32 => "float",
            ScalarType::F64 => "double",
            ScalarType::I32 => "int",
            ScalarType::U32 => "unsigned int",
        }
    }

    /// Whether it holds whole numbers only.
    pub fn is_integer(self) -> bool {
        matches!(self, ScalarType::I32 | ScalarType::U32)
    }

    /// The values the type holds exactly.
    pub fn range(self) -> (f64, f64) {
        match self {
            ScalarType::F32 => (f64::from(f32::MIN), f64::from(f32::MAX)),
            ScalarType::F64 => (f64::MIN, f64::MAX),
            ScalarType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
            ScalarType::U32 => (0.0, f64::from(u32::MAX)),
        }
    }
}

impl ScalarDecl {
    /// The range a value must lie in: the declared one within the type's.
    pub fn bounds(&self) -> (f64, f64) {
        let (lo, hi) = self.ty.range();
        (self.min.unwrap_or(lo).max(lo), self.max.unwrap_or(hi).min(hi))
    }

    pub fn trial_value(&self) -> f64 {
        let (lo, hi) = (self.min.unwrap_or(0.0), self.max.unwrap_or(0.0));
        let middle = if self.min.is_some() && self.max.is_some() { (lo + hi) / 2.0 } else { 0.0 };
        // An integer scalar's middle is a whole number.
        let middle = if self.ty.is_integer() { middle.floor() } else { middle };
        self.trial.or(self.default).unwrap_or(middle)
    }
}

/// Work done by one call, for performance figures: expressions of the quantities, `elem`
/// (the variant's element size in bytes) and `elem_<operand>` (that operand's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Work {
    /// Bytes read and written.
    pub bytes: Expr,
    /// Floating-point operations; 0 for data movement.
    #[serde(default = "zero")]
    pub flops: Expr,
}

fn zero() -> Expr {
    Expr::constant(0)
}

/// What a variant's speed is compared with, in the same process: `"copy"`, or a library call
/// that a trials plug-in provides under that name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Baseline {
    /// A device-to-device copy of half the work's bytes (a copy reads and writes each byte).
    Copy,
    /// A library call on the same operands, by the name a trials plug-in gives it.
    Library(String),
}

impl From<String> for Baseline {
    fn from(word: String) -> Baseline {
        if word == "copy" {
            Baseline::Copy
        } else {
            Baseline::Library(word)
        }
    }
}

impl From<Baseline> for String {
    fn from(baseline: Baseline) -> String {
        match baseline {
            Baseline::Copy => "copy".into(),
            Baseline::Library(name) => name,
        }
    }
}

/// What a variant's results are compared with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// The family's reference variants: those of this backend (plain kernels, accumulating in
    /// f64), run on the GPU beside the variant on the same inputs; the one of the same dtype.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// A library call instead of a reference variant, by the name a trials plug-in gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// Largest relative (Frobenius) error allowed, per dtype.
    pub tolerance: BTreeMap<Dtype, f64>,
    /// Per dtype, the largest distance allowed between each output element and the exact
    /// result (the f32 reference variant's, computed in f64), in units in the last place of the
    /// output type: for families whose arithmetic is in f32 and rounded once, about 0.5, so
    /// that a second rounding fails the trial. Checked on every output element.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ulps: BTreeMap<Dtype, f64>,
    /// The length of the reductions an output element comes from; past 4096 the tolerance
    /// grows with its square root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduction: Option<Expr>,
    /// Outputs that are the difference of two values the size of another output, by name:
    /// their error is judged against that output's magnitude where it is the larger (f32
    /// rounds cross-entropy's loss = lse − logit to lse's units in the last place, however
    /// near 0 the loss).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub relative_to: BTreeMap<String, String>,
}

/// Shapes for the trials, beside those made from the quantities and tiles.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trials {
    /// More correctness shapes, quantity by quantity (large rows, odd widths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<BTreeMap<String, u64>>,
    /// The shape of the performance trial.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub perf: BTreeMap<String, u64>,
    /// The shapes `bench` times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bench: Vec<BTreeMap<String, u64>>,
    /// The problems `tilesmith tune --family` measures (default: the bench's): spread over the
    /// shapes calls take, no two far apart, since the chooser reads a table's entries within a
    /// factor of two of a call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tune: Vec<BTreeMap<String, u64>>,
    /// Lists of `[shape_sets]` (problems several families tune at) whose shapes join `tune`'s,
    /// after them. Resolved as variants.toml is read: a declaration past the parser (the
    /// manifest's) lists them in `tune` and names none here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tune_sets: Vec<String>,
}

/// The most shapes one of `trials.shapes`, `trials.bench` and `trials.tune` lists.
pub const MAX_TRIAL_SHAPES: usize = 10_000;

/// The axes every family has, beside its own.
pub const COMMON_AXES: &[&str] = &["tile", "dtype", "backend", "warps", "bounds"];

/// The names a template sees beside the axes (pipeline's `render::context`, which a test there
/// keeps in step), besides `t<quantity>` for tile edges and `<operand>_row_major`: an axis
/// cannot take one, or it would hide it from every template.
pub const TEMPLATE_NAMES: &[&str] = &[
    "template",
    "variant",
    "params",
    "family",
    "ctype",
    "elem_bytes",
    "operand_dtype",
    "operand_ctype",
    "operand_bytes",
    "threads",
    "checked",
    "sass",
    "ptx",
    "emit",
    "signature",
];

/// The value of a `dtype_axis` that means the variant's own dtype.
pub const SAME_DTYPE: &str = "in";

/// The name expressions use for the element size in bytes.
pub const ELEM: &str = "elem";

/// What an integer operand read without declared `values` is told.
const UNDRAWN_INTEGERS: &str = "holds integers: declare the values trials draw for it (`values = { integers = [0, \"cols\"] }`)";

/// The name launch expressions use for the GPU's multiprocessor count.
pub const SMS: &str = "sms";

/// `env` with `sms` (the GPU's multiprocessors) added, for the expressions that may name it:
/// grid rules and workspace sizes.
pub fn with_sms(env: &dyn Fn(&str) -> Option<u64>, sms: u32) -> impl Fn(&str) -> Option<u64> + '_ {
    move |name| if name == SMS { Some(u64::from(sms)) } else { env(name) }
}

impl Family {
    /// A declaration of nothing: what an entry read without one holds until a manifest gives
    /// it its family's; an entry holding it is refused.
    pub fn unstated() -> Family {
        Family {
            quantities: Vec::new(),
            tile: Vec::new(),
            batch: None,
            axes: Vec::new(),
            operands: Vec::new(),
            scalars: Vec::new(),
            rules: Vec::new(),
            work: Work { bytes: Expr::constant(0), flops: Expr::constant(0) },
            baseline: Baseline::Copy,
            reference: Reference {
                backend: None,
                library: None,
                tolerance: BTreeMap::new(),
                ulps: BTreeMap::new(),
                reduction: None,
                relative_to: BTreeMap::new(),
            },
            trials: Trials::default(),
        }
    }

    /// Every axis of the family, in the order names show them and groups expand them: its own
    /// axes shown always, the tile, dtype, backend and warps, its other axes, then bounds.
    pub fn axes(&self) -> Vec<Axis> {
        let own = |always: bool| {
            self.axes.iter().filter(move |a| (a.show == Show::Always) == always).map(|a| Axis {
                name: a.name.clone(),
                domain: match a.range {
                    Some([min, max]) => Domain::Count { min, max },
                    None => Domain::Words(a.values.clone()),
                },
                naming: match a.show {
                    Show::Always => Naming::Always,
                    Show::IfNotDefault => Naming::IfNotDefault { prefix: a.prefix.clone() },
                },
                default: a.default_value(),
            })
        };
        let mut axes: Vec<Axis> = own(true).collect();
        if !self.tile.is_empty() {
            axes.push(Axis { name: "tile".into(), domain: Domain::Tile(self.tile.clone()), naming: Naming::Always, default: None });
        }
        let words = |all: Vec<String>| Domain::Words(all);
        axes.push(Axis {
            name: "dtype".into(),
            domain: words(Dtype::ALL.iter().map(|d| d.to_string()).collect()),
            naming: Naming::IfNotDefault { prefix: String::new() },
            default: None,
        });
        axes.push(Axis {
            name: "backend".into(),
            domain: Domain::Backend,
            naming: Naming::IfNotDefault { prefix: String::new() },
            default: None,
        });
        axes.push(Axis {
            name: "warps".into(),
            domain: Domain::Count { min: 1, max: 32 },
            naming: Naming::IfNotDefault { prefix: "w".into() },
            default: None,
        });
        axes.extend(own(false));
        axes.push(Axis {
            name: "bounds".into(),
            domain: words(Bounds::ALL.iter().map(|b| b.to_string()).collect()),
            naming: Naming::IfNotDefault { prefix: String::new() },
            default: None,
        });
        axes
    }

    /// The stride quantities the operands name: leading dimensions and every side's stride.
    pub fn lds(&self) -> impl Iterator<Item = &str> {
        self.operands.iter().flat_map(OperandDecl::stride_names)
    }

    /// The batch-stride quantities the operands name.
    pub fn batch_strides(&self) -> impl Iterator<Item = &str> {
        self.operands.iter().filter_map(|o| o.batch_stride.as_deref())
    }

    /// What a template sees under `name` beside the axes, if anything: the words that say so.
    fn template_name(&self, name: &str) -> Option<String> {
        if TEMPLATE_NAMES.contains(&name) {
            return Some(format!("(`{name}`: {})", TEMPLATE_NAMES.join(", ")));
        }
        if let Some(quantity) = name.strip_prefix('t').filter(|q| self.tile.iter().any(|edge| edge == q)) {
            return Some(format!("(the tile's edge along `{quantity}`)"));
        }
        let operand = name.strip_suffix("_row_major").filter(|o| self.operands.iter().any(|d| d.name == *o))?;
        Some(format!("(whether operand `{operand}` is row-major)"))
    }

    /// Its own axes that change what a variant computes (attention's `causal`), not only how
    /// (those marked `tuning`): what a call may ask for, and the chooser matches.
    pub fn computing_axes(&self) -> impl Iterator<Item = &AxisDecl> {
        self.axes.iter().filter(|a| !a.tuning)
    }

    /// The quantities a call gives: the shape's, the leading dimensions, then the batch's
    /// count and strides.
    pub fn all_quantities(&self) -> Vec<&str> {
        self.quantities.iter().map(String::as_str).chain(self.lds()).chain(self.batch.as_deref()).chain(self.batch_strides()).collect()
    }

    /// The value a call that leaves `quantity` out means: 1 problem, strides of 0; none for the
    /// others, which every call gives.
    pub fn default_quantity(&self, quantity: &str) -> Option<u64> {
        if self.batch.as_deref() == Some(quantity) {
            Some(1)
        } else if self.batch_strides().any(|s| s == quantity) {
            Some(0)
        } else {
            None
        }
    }

    pub fn operand(&self, name: &str) -> Option<&OperandDecl> {
        self.operands.iter().find(|o| o.name == name)
    }

    /// The operands `variant` reads as integers without declared `values`: trials would draw
    /// them uniform in [-1, 1], so -1, 0 or 1. The declaration's check refuses fixed integer
    /// types; this finds those a variant's dtype (or a dtype axis) makes integers.
    pub fn undrawn_integers(&self, variant: &Variant) -> Result<(), String> {
        let undrawn = self
            .operands
            .iter()
            .filter(|o| o.access.reads() && o.values.is_none() && o.offsets.is_none())
            .map(|o| (o, self.operand_dtype(variant, o)))
            .find(|(_, dtype)| dtype.is_integer());
        match undrawn {
            Some((o, dtype)) => Err(format!("operand `{}` ({dtype}) {UNDRAWN_INTEGERS}", o.name)),
            None => Ok(()),
        }
    }

    /// Refuses trial values a float operand of `variant` cannot hold: drawn past its type's
    /// largest finite value (uniform bounds, or a normal law's mean and six deviations), they
    /// would be infinities, and every trial would compare infinities.
    pub fn values_fit(&self, variant: &Variant) -> Result<(), String> {
        for decl in self.operands.iter().filter(|o| o.access.reads()) {
            let dtype = self.operand_dtype(variant, decl);
            let (Some(max), Some(values)) = (dtype.max_finite(), &decl.values) else { continue };
            let reach = match (values.uniform, values.normal) {
                (Some([lo, hi]), _) => lo.abs().max(hi.abs()),
                (None, Some([mean, std])) => mean.abs() + 6.0 * std.abs(),
                (None, None) => continue,
            };
            if reach > max {
                return Err(format!(
                    "operand `{}` ({dtype}): its trial values reach {reach}, past {max}, the largest finite {dtype}",
                    decl.name
                ));
            }
        }
        Ok(())
    }

    /// The element type of `decl` in `variant`: its fixed dtype, its dtype axis's value, or the
    /// variant's dtype.
    pub fn operand_dtype(&self, variant: &Variant, decl: &OperandDecl) -> Dtype {
        let by_axis = || decl.dtype_axis.as_deref().and_then(|axis| variant.word(axis)).and_then(Dtype::parse);
        decl.dtype.or_else(by_axis).unwrap_or(variant.dtype)
    }

    /// `elem_<operand>` for each operand: the names work expressions use for an operand's
    /// element size, beside `elem`.
    pub fn elem_names(&self) -> Vec<String> {
        self.operands.iter().map(|o| format!("{ELEM}_{}", o.name)).collect()
    }

    /// What work expressions of a call of `variant` read: `elem`, `elem_<operand>`, else the
    /// call's quantities, else the variant's count axes (a backend's `cost_bytes` may read
    /// `cluster`), else its word axes as their value's position in the axis's list
    /// (attention's FLOPs halve where `causal` is 1).
    pub fn work_value(&self, variant: &Variant, name: &str, quantity: &dyn Fn(&str) -> Option<u64>) -> Option<u64> {
        if name == ELEM {
            return Some(u64::from(variant.dtype.size_bytes()));
        }
        match name.strip_prefix(ELEM).and_then(|n| n.strip_prefix('_')).and_then(|n| self.operand(n)) {
            Some(decl) => Some(u64::from(self.operand_dtype(variant, decl).size_bytes())),
            None => quantity(name).or_else(|| variant.count(name).map(u64::from)).or_else(|| {
                let axis = self.axes.iter().find(|axis| axis.name == name)?;
                let word = variant.word(name)?;
                axis.values.iter().position(|v| v == word).map(|p| p as u64)
            }),
        }
    }

    pub fn scalar(&self, name: &str) -> Option<&ScalarDecl> {
        self.scalars.iter().find(|s| s.name == name)
    }

    /// Every rule a declaration meets, each broken one as a message naming the item.
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let lists = [("shapes", self.trials.shapes.len()), ("bench", self.trials.bench.len()), ("tune", self.trials.tune.len())];
        if let Some((list, count)) = lists.into_iter().find(|(_, count)| *count > MAX_TRIAL_SHAPES) {
            // Refused before anything reads them: every variant's trials walk every shape.
            return vec![format!("trials.{list} lists {count} shapes, more than the {MAX_TRIAL_SHAPES} a list may hold")];
        }
        let mut names = BTreeSet::new();
        let mut name = |what: &str, name: &str, problems: &mut Vec<String>| {
            if !crate::variant::is_c_identifier(name) {
                problems.push(format!("{what} `{name}` is not a C identifier"));
            } else if !names.insert(name.to_string()) || name == ELEM || name == SMS || name.starts_with("elem_") {
                problems.push(format!(
                    "{what} `{name}`: the name is taken (by another quantity, operand, scalar, `elem`, `elem_<operand>` or `sms`)"
                ));
            }
        };
        if self.quantities.is_empty() {
            problems.push("declares no quantities".into());
        }
        for q in &self.quantities {
            name("quantity", q, &mut problems);
        }
        if let Some(batch) = &self.batch {
            name("batch", batch, &mut problems);
            if !self.operands.iter().any(|o| o.access.writes() && o.batch_stride.is_some()) {
                problems.push(format!(
                    "batch `{batch}`: every operand written needs a batch_stride, or the problems would write over each other"
                ));
            }
        }
        for edge in &self.tile {
            if !self.quantities.contains(edge) {
                problems.push(format!("tile edge `{edge}` is not a quantity (quantities: {})", self.quantities.join(", ")));
            }
        }
        let mut axis_names = BTreeSet::new();
        for axis in &self.axes {
            if COMMON_AXES.contains(&axis.name.as_str()) || !crate::variant::is_c_identifier(&axis.name) || !axis_names.insert(&axis.name) {
                problems.push(format!(
                    "axis `{}`: axis names are C identifiers, unique, and not one of {}",
                    axis.name,
                    COMMON_AXES.join(", ")
                ));
            } else if let Some(taken) = self.template_name(&axis.name) {
                problems.push(format!("axis `{}`: the name is taken by what templates see {taken}; name the axis otherwise", axis.name));
            }
            match (axis.values.is_empty(), axis.range) {
                (false, None) if axis.values.iter().all(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')) => {}
                (true, Some([min, max])) if min <= max => {}
                _ => problems.push(format!(
                    "axis `{}` takes either `values` (a non-empty list of words: letters, digits, `_`) or `range = [min, max]`",
                    axis.name
                )),
            }
            let in_domain = |value: &Value| match (value, axis.range) {
                (Value::Word(word), None) => axis.values.contains(word),
                (Value::Count(n), Some([min, max])) => (min..=max).contains(n),
                _ => false,
            };
            if let Some(default) = axis.default_value().filter(|d| !in_domain(d)) {
                let domain = match axis.range {
                    Some([min, max]) => format!("a count from {min} to {max}"),
                    None => format!("one of {}", axis.values.join(", ")),
                };
                problems.push(format!("axis `{}`: default `{default}` must be {domain}", axis.name));
            }
        }
        let quantities: Vec<&str> = self.quantities.iter().map(String::as_str).collect();
        if self.operands.is_empty() {
            problems.push("declares no operands".into());
        }
        if !self.operands.iter().any(|o| o.access.writes()) {
            problems.push("no operand is written (access = \"write\" or \"readwrite\")".into());
        }
        for operand in &self.operands {
            let what = format!("operand `{}`", operand.name);
            name("operand", &operand.name, &mut problems);
            if !(1..=MAX_RANK).contains(&operand.dims.len()) {
                problems.push(format!("{what}: dims has 1 to {MAX_RANK} sides, outermost first"));
            }
            for dim in &operand.dims {
                if let Err(rule) = dim.check_names(&quantities) {
                    problems.push(format!("{what}: dims: {rule}"));
                }
            }
            let rank = operand.dims.len();
            match (&operand.ld, operand.strides.len(), rank) {
                (_, _, 0) => problems.push(format!("{what}: `dims` lists no side; an operand has 1 to {MAX_RANK}")),
                (None, 0, 1) => {}
                (Some(ld), 0, 2) => name("leading dimension", ld, &mut problems),
                (None, n, _) if rank >= 2 && n + 1 == rank => {
                    for stride in &operand.strides {
                        name("stride", stride, &mut problems);
                    }
                }
                (None, 0, 2) => problems.push(format!("{what}: a matrix names its leading dimension (`ld = \"ld{}\"`)", operand.name)),
                (_, _, 1) => problems.push(format!("{what}: a vector is contiguous: it has no leading dimension or strides")),
                (Some(_), _, _) => problems.push(format!("{what}: give `ld` (a matrix) or `strides`, not both, and `ld` of matrices only")),
                (None, n, _) => problems.push(format!(
                    "{what}: an operand of {rank} sides names a stride for each but the last (contiguous): {} quantities, where `strides` lists {n}",
                    rank - 1
                )),
            }
            if rank > 2 && operand.order.is_some() {
                problems.push(format!("{what}: `order` says how a matrix is stored; an operand of {rank} sides gives its strides"));
            }
            if let Some(order) = &operand.order {
                if let Err(rule) = self.order_axis(order) {
                    problems.push(format!("{what}: order `{order}`: {rule}"));
                }
            }
            if operand.align.is_some_and(|a| !a.is_power_of_two()) {
                problems.push(format!("{what}: align must be a power of two"));
            }
            match (&operand.batch_stride, &self.batch) {
                (Some(stride), Some(_)) => name("batch stride", stride, &mut problems),
                (Some(_), None) => {
                    problems.push(format!("{what}: a batch stride needs the family's `batch` (the quantity counting problems)"))
                }
                (None, _) => {}
            }
            if let Some(axis) = &operand.dtype_axis {
                let words = self.axes.iter().find(|a| &a.name == axis).map(|a| &a.values);
                let dtypes = || Dtype::ALL.iter().map(|d| d.as_str()).chain([SAME_DTYPE]).collect::<Vec<_>>().join(", ");
                match words {
                    _ if operand.dtype.is_some() => problems.push(format!("{what}: give a fixed `dtype` or a `dtype_axis`, not both")),
                    Some(words) if !words.is_empty() && words.iter().all(|w| w == SAME_DTYPE || Dtype::parse(w).is_some()) => {}
                    _ => problems
                        .push(format!("{what}: dtype_axis `{axis}` must be an axis of the family whose values are among {}", dtypes())),
                }
            }
            if operand.optional && operand.access == Access::ReadWrite {
                problems.push(format!(
                    "{what}: an operand updated in place may not be optional (its kernel reads it: a call cannot leave out its input)"
                ));
            }
            match (&operand.values, operand.access.reads()) {
                (Some(_), false) => problems.push(format!("{what}: `values` fills what a kernel reads; a written operand is poisoned")),
                (Some(values), true) => {
                    let names = values.integers.iter().flatten().flat_map(|e| e.names()).collect::<Vec<_>>();
                    if let Some(unknown) = names.iter().find(|n| !quantities.contains(n)) {
                        problems.push(format!("{what}: values.integers names `{unknown}`, which is not a quantity"));
                    } else if let Err(rule) = values.check() {
                        problems.push(format!("{what}: values: {rule}"));
                    } else if names.is_empty() {
                        // A range of constants is checked now (against the type where it is
                        // fixed); one of quantities with each trial's.
                        if let Err(rule) = values.law(operand.dtype.unwrap_or(Dtype::F32), &|_| None) {
                            problems.push(format!("{what}: values: {rule}"));
                        }
                    }
                }
                (None, true) if operand.offsets.is_none() && operand.dtype.is_some_and(Dtype::is_integer) => {
                    problems.push(format!("{what} {}", UNDRAWN_INTEGERS))
                }
                (None, _) => {}
            }
            if let Some(offsets) = &operand.offsets {
                let shape_ok = operand.access == Access::Read && operand.dims.len() == 1 && !operand.optional;
                if !shape_ok || operand.dtype != Some(Dtype::I32) || operand.values.is_some() {
                    problems.push(format!(
                        "{what}: offsets are a vector the kernel only reads, of `dtype = \"i32\"`, passed by every call, and drawn by the trials (no `values`)"
                    ));
                }
                for expr in std::iter::once(&offsets.total).chain(&offsets.longest) {
                    if let Err(rule) = expr.check_names(&quantities) {
                        problems.push(format!("{what}: offsets: {rule}"));
                    }
                }
            }
        }
        for scalar in &self.scalars {
            name("scalar", &scalar.name, &mut problems);
            let (lo, hi) = scalar.bounds();
            if lo > hi || scalar.min.is_some_and(f64::is_nan) || scalar.max.is_some_and(f64::is_nan) {
                problems.push(format!("scalar `{}`: min must not exceed max, within its type {:?}", scalar.name, scalar.ty));
            }
            if !(lo..=hi).contains(&scalar.trial_value()) {
                problems.push(format!("scalar `{}`: its trial value {} is outside {lo}..={hi}", scalar.name, scalar.trial_value()));
            }
            for (what, value) in [("trial value", scalar.trial), ("default", scalar.default), ("min", scalar.min), ("max", scalar.max)] {
                if let Some(value) = value.filter(|v| scalar.ty.is_integer() && v.fract() != 0.0) {
                    problems.push(format!("scalar `{}` is an integer ({}), but its {what} is {value}", scalar.name, scalar.ty.cuda_type()));
                }
            }
            if let Some(default) = scalar.default.filter(|d| !(lo..=hi).contains(d)) {
                problems.push(format!("scalar `{}`: its default {default} is outside {lo}..={hi}", scalar.name));
            }
        }
        let elems = self.elem_names();
        let own_axes = self.axes.iter().map(|axis| axis.name.as_str());
        let with_elem: Vec<&str> =
            quantities.iter().copied().chain([ELEM]).chain(elems.iter().map(String::as_str)).chain(own_axes).collect();
        for (what, expr) in [("work.bytes", &self.work.bytes), ("work.flops", &self.work.flops)] {
            if let Err(rule) = expr.check_names(&with_elem) {
                problems.push(format!("{what}: {rule}"));
            }
        }
        let reference = &self.reference;
        match (&reference.backend, &reference.library) {
            (Some(_), None) | (None, Some(_)) => {}
            _ => problems.push(
                "reference: name either `backend` (the family's reference variants) or `library` (a trials plug-in's), not both or neither"
                    .into(),
            ),
        }
        let libraries =
            [reference.library.as_deref(), if let Baseline::Library(name) = &self.baseline { Some(name.as_str()) } else { None }];
        for name in libraries.into_iter().flatten().filter(|name| !crate::config::is_identifier(name)) {
            problems.push(format!(
                "library `{name}`: a library is named by an identifier (letters, digits and _), or the baseline is \"copy\""
            ));
        }
        if reference.tolerance.values().any(|t| !(t.is_finite() && *t >= 0.0)) {
            problems.push("reference.tolerance: tolerances are finite and at least 0".into());
        }
        if reference.ulps.values().any(|u| !(u.is_finite() && *u >= 0.5)) {
            problems.push("reference.ulps: each is finite and at least 0.5 (a correctly rounded result is within half a unit)".into());
        }
        if !reference.ulps.is_empty() && reference.backend.is_none() {
            problems.push("reference.ulps needs a reference `backend` with an f32 variant, whose results stand for the exact ones".into());
        }
        if let Some(Err(rule)) = reference.reduction.as_ref().map(|r| r.check_names(&quantities)) {
            problems.push(format!("reference.reduction: {rule}"));
        }
        let written = |name: &str| self.operand(name).is_some_and(|o| o.access.writes());
        for (output, scale) in &reference.relative_to {
            if !written(output) || !written(scale) || output == scale {
                problems.push(format!(
                    "reference.relative_to: `{output} = \"{scale}\"` names two different outputs of the family (operands it writes)"
                ));
            }
        }
        let all = self.all_quantities();
        let shapes = self
            .trials
            .shapes
            .iter()
            .chain(&self.trials.bench)
            .chain(&self.trials.tune)
            .chain(Some(&self.trials.perf).filter(|p| !p.is_empty()));
        problems.extend(self.rules.iter().filter_map(|rule| rule.check_names(&all).err()));
        problems.extend(self.rules.iter().filter_map(|rule| rule.check_can_hold().err()));
        for shape in shapes {
            if let Some(q) = shape.keys().find(|q| !all.contains(&q.as_str())) {
                problems.push(format!("trials: shape names `{q}`, which is not a quantity (quantities: {})", all.join(", ")));
            }
            // A shape that leaves out a rule's quantity (a leading dimension the trials choose)
            // is checked at the call instead.
            for rule in self.rules.iter().filter(|r| r.names().all(|n| shape.contains_key(n))) {
                if let Err(broken) = rule.check(&|q| shape.get(q).copied()) {
                    let described: Vec<String> = shape.iter().map(|(q, v)| format!("{q}={v}")).collect();
                    problems.push(format!("trials: shape {}: {broken}", described.join(" ")));
                }
            }
        }
        problems
    }

    /// The largest relative error allowed for results of `dtype` on a call with these
    /// quantities: the declared tolerance, grown with the square root of the reduction length
    /// past 4096.
    pub fn tolerance(&self, dtype: Dtype, quantity: &dyn Fn(&str) -> Option<u64>) -> Result<f64, String> {
        let base = *self.reference.tolerance.get(&dtype).ok_or_else(|| format!("the family declares no tolerance for {dtype}"))?;
        let length = match &self.reference.reduction {
            Some(expr) => expr.eval(quantity)? as f64,
            None => 1.0,
        };
        Ok(base * (length / 4096.0).sqrt().max(1.0))
    }

    /// How `operand` is stored in a call of `variant`: rows of a column-major operand are its
    /// columns, a vector is one row; the leading dimension is its `ld` quantity, else the row
    /// length. `quantity` gives the call's values.
    pub fn stored(&self, variant: &Variant, operand: &OperandDecl, quantity: &dyn Fn(&str) -> Option<u64>) -> Result<Stored, String> {
        let dims = operand.dims.iter().map(|d| d.eval(quantity)).collect::<Result<Vec<u64>, String>>()?;
        let given = |name: &str| quantity(name).ok_or_else(|| format!("the call gives no `{name}`"));
        let strides = operand.stride_names().map(given).collect::<Result<Vec<u64>, String>>()?;
        let (rows, cols, outer) = match dims[..] {
            [rows, cols] => (rows, cols, Vec::new()),
            [len] => (1, len, Vec::new()),
            [.., rows, cols] if strides.len() + 1 == dims.len() => {
                (rows, cols, dims.iter().copied().zip(strides.iter().copied()).take(dims.len() - 2).collect())
            }
            _ => return Err(format!("operand `{}` has {} dims and {} strides", operand.name, dims.len(), strides.len())),
        };
        let order = match operand.order.as_deref().map(|o| self.order_axis(o)) {
            Some(Ok((axis, index))) => {
                let word = variant.word(&axis.name).unwrap_or_default();
                Some((axis.name.clone(), word.to_string(), word.as_bytes().get(index) == Some(&b't')))
            }
            _ => None,
        };
        let row_major = order.as_ref().is_none_or(|(_, _, row_major)| *row_major);
        let (rows, cols) = if row_major { (rows, cols) } else { (cols, rows) };
        // The stride of the rows: the last before the contiguous side.
        let ld = if dims.len() >= 2 { strides.last().copied().unwrap_or(cols) } else { cols };
        let layout = match order {
            Some((axis, word, _)) => format!("{}, {axis} {word}", if row_major { "row-major" } else { "column-major" }),
            None => "row-major".into(),
        };
        Ok(Stored { rows, cols, ld, outer, layout })
    }

    /// The axis and letter index an operand's `order` names (`layout[0]`).
    pub fn order_axis(&self, order: &str) -> Result<(&AxisDecl, usize), String> {
        let (axis, rest) = order.split_once('[').ok_or("write it as axis[index], e.g. layout[0]")?;
        let index: usize = rest.strip_suffix(']').and_then(|i| i.parse().ok()).ok_or("write it as axis[index], e.g. layout[0]")?;
        let decl = self.axes.iter().find(|a| a.name == axis).ok_or_else(|| format!("`{axis}` is not one of the family's axes"))?;
        let letters_ok =
            !decl.values.is_empty() && decl.values.iter().all(|v| v.as_bytes().get(index).is_some_and(|c| *c == b't' || *c == b'n'));
        if !letters_ok {
            return Err(format!("every value of axis `{axis}` must have a letter `t` or `n` at index {index}"));
        }
        Ok((decl, index))
    }
}
