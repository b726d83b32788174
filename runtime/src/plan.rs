//! The checks that stand between a call and a launch, as pure functions of the manifest data,
//! the shape and the buffers, so that they are tested without a GPU.

use std::collections::BTreeMap;
use tilesmith_spec::arch::compute_capability;
use tilesmith_spec::family::with_sms;
use tilesmith_spec::family::ScalarType;
use tilesmith_spec::launch::MAX_TENSOR_MAP_SIDES;
use tilesmith_spec::launch::MAX_WORKSPACE_BYTES;
use tilesmith_spec::{Access, Built, Dtype, Family, GridRule, ParamKind, Targets};

/// A device buffer as the checks see it: its length in elements and its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub len: usize,
    pub addr: u64,
}

impl Buffer {
    /// Buffers of these lengths at 256-byte-aligned addresses 2^48 bytes apart, none at 0: for
    /// asking whether a variant takes a call, without memory.
    pub fn unallocated<const N: usize>(lens: [usize; N]) -> [Buffer; N] {
        std::array::from_fn(|i| Buffer { len: lens[i], addr: (i as u64 + 1) << 48 })
    }
}

/// One call's arguments, bound by name: operands (element type and buffer), quantities and
/// scalars, as the family's declaration names them, and the values it asks of axes that change
/// what a variant computes (attention's `causal`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Call {
    pub operands: Vec<(String, Dtype, Buffer)>,
    pub quantities: Vec<(String, u64)>,
    pub scalars: Vec<(String, f64)>,
    pub axes: Vec<(String, String)>,
}

impl Call {
    /// A hash of everything its plan depends on but the GPU (scalars by their bits), for
    /// finding a plan made before without copying the call.
    pub fn fingerprint(&self, hasher: &mut impl std::hash::Hasher) {
        use std::hash::Hash;
        for (name, dtype, buffer) in &self.operands {
            (name, dtype, buffer).hash(hasher);
        }
        self.quantities.hash(hasher);
        for (name, value) in &self.scalars {
            (name, value.to_bits()).hash(hasher);
        }
        self.axes.hash(hasher);
    }

    pub fn operand(mut self, name: &str, dtype: Dtype, buffer: Buffer) -> Call {
        self.operands.push((name.to_string(), dtype, buffer));
        self
    }

    pub fn quantity(mut self, name: &str, value: u64) -> Call {
        self.quantities.push((name.to_string(), value));
        self
    }

    pub fn scalar(mut self, name: &str, value: f64) -> Call {
        self.scalars.push((name.to_string(), value));
        self
    }

    pub fn axis(mut self, name: &str, value: &str) -> Call {
        self.axes.push((name.to_string(), value.to_string()));
        self
    }
}

/// A launch the checks allowed, with its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Thread-block cluster; [1, 1, 1] for none.
    pub cluster: [u32; 3],
    /// The grid is persistent (its blocks loop over the tiles), so the launch may shrink it to
    /// the clusters that fit on the GPU at once; any other grid is launched whole.
    pub persistent: bool,
    pub dynamic_smem_bytes: u32,
    /// One per kernel parameter, in the order of the manifest's parameter list.
    pub args: Vec<Arg>,
    /// Operands holding offsets the kernel indexes with: their values are checked on the host
    /// before the launch ([`OffsetsCheck::check`]).
    pub offsets: Vec<OffsetsCheck>,
}

/// An operand of cumulative offsets a call passes (the family's `offsets`), with its rules'
/// quantities evaluated: what the launch reads back and checks, since the kernel would index
/// out of bounds with values that break them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetsCheck {
    pub operand: String,
    pub addr: u64,
    /// Its elements (i32), one more than the pieces.
    pub len: usize,
    pub total: u64,
    pub longest: Option<u64>,
    /// The operand holds the pieces' ends only ([`Offsets::ends`](tilesmith_spec::family::Offsets::ends)).
    pub ends: bool,
}

impl OffsetsCheck {
    /// The rules of [`Offsets`](tilesmith_spec::family::Offsets) on the values read back.
    pub fn check(&self, values: &[i32]) -> Result<(), String> {
        tilesmith_spec::family::Offsets::check(&self.operand, values, self.total, self.longest, self.ends)
    }
}

/// A kernel argument, as the kernel's parameter takes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    Pointer(u64),
    I32(i32),
    I64(i64),
    U32(u32),
    F32(f32),
    F64(f64),
    /// Encoded into a `CUtensorMap` just before the launch, which needs the driver.
    TensorMap(TensorMapArg),
    /// The GPU's workspace, or its zeroed one, at least `bytes` long: its address is known at
    /// the launch.
    Workspace {
        bytes: u64,
        zeroed: bool,
    },
}

/// A tensor map of an operand as stored, checked against TMA's rules: its sides innermost
/// first, and one over the problems of a batch where the kernel maps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorMapArg {
    pub addr: u64,
    pub dtype: Dtype,
    /// Sides mapped, 2 to 5: [row length, rows, the sides before those, problems].
    pub rank: u32,
    /// Elements along each side; 1 past `rank`.
    pub dims: [u64; 5],
    /// Bytes between consecutive indices of each side past the first.
    pub strides_bytes: [u64; 4],
    /// Elements copied at a time along each side.
    pub box_: [u32; 5],
    pub swizzle_bytes: u32,
}

/// Elements `problems` matrices of `one` elements each span, `stride` apart, from the first's
/// start; `None` past an address.
pub fn batch_span(one: usize, problems: usize, stride: usize) -> Option<usize> {
    if one == 0 || problems == 0 {
        return Some(0);
    }
    (problems - 1).checked_mul(stride)?.checked_add(one)
}

/// Elements a matrix of `rows` rows of `cols` with leading dimension `ld` spans.
pub fn span(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(ld)?.checked_add(cols)
}

/// One operand as stored: rows of `cols` elements, `ld` apart, and for one of more than two
/// sides, the sides before those (`outer`: the stride's name, count, stride, outermost first);
/// with a batch, `problems` of them `stride` elements apart (1 and 0 otherwise).
#[derive(Clone, Debug)]
pub struct Stored {
    pub name: String,
    pub ld_name: String,
    pub buffer: Buffer,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    pub outer: Vec<(String, usize, usize)>,
    pub problems: usize,
    pub stride: usize,
    /// How it is stored, for messages: `row-major`, `column-major, layout nn`.
    pub layout: String,
    pub dtype: Dtype,
}

impl Stored {
    /// Elements one problem's operand spans.
    fn span(&self) -> Option<usize> {
        let matrix = span(self.rows, self.cols, self.ld)?;
        if matrix == 0 || self.outer.iter().any(|(_, count, _)| *count == 0) {
            return Some(0);
        }
        self.outer.iter().try_fold(matrix, |end, (_, count, stride)| (count - 1).checked_mul(*stride)?.checked_add(end))
    }

    /// The first side (its stride's name and value) whose elements reach those of the next
    /// index along it: sides ordered by stride, each must step past everything the smaller
    /// ones span, or two indices would name one element. Only an operand written must not.
    fn self_overlap(&self) -> Option<(&str, usize, usize)> {
        // An operand with no element has no two indices to name one.
        if self.span() == Some(0) {
            return None;
        }
        let mut sides: Vec<(&str, usize, usize)> =
            self.outer.iter().map(|(name, count, stride)| (name.as_str(), *count, *stride)).collect();
        sides.push((self.ld_name.as_str(), self.rows, self.ld));
        sides.retain(|(_, count, _)| *count > 1);
        sides.sort_by_key(|(_, _, stride)| *stride);
        let mut extent = self.cols;
        for (name, count, stride) in sides {
            if stride < extent {
                return Some((name, stride, extent));
            }
            extent = (count - 1).saturating_mul(stride).saturating_add(extent);
        }
        None
    }

    /// Elements every problem's matrix spans, from the first's start.
    fn batch_span(&self) -> Option<usize> {
        batch_span(self.span()?, self.problems, self.stride)
    }

    /// The bytes it spans, [start, end), for telling whether operands overlap.
    fn bytes(&self) -> (u128, u128) {
        let start = u128::from(self.buffer.addr);
        let len = self.batch_span().map_or(u128::MAX, |n| n as u128 * u128::from(self.dtype.size_bytes()));
        (start, start.saturating_add(len))
    }
}

/// The rules every call meets, whatever the kernel: rows no longer than their leading
/// dimension, and a buffer that holds what the matrix spans (every problem's, with a batch).
pub fn check_stored(op: &Stored) -> Result<(), String> {
    let Stored { name, ld_name, buffer, rows, cols, ld, layout, problems, stride, .. } = op;
    let (rows, cols, ld) = (*rows, *cols, *ld);
    let sides = || op.outer.iter().map(|(_, count, _)| format!("{count} x ")).collect::<String>();
    let end = u128::from(buffer.addr) + buffer.len as u128 * u128::from(op.dtype.size_bytes());
    if end > 1u128 << 64 {
        return Err(format!(
            "{name} starts at {:#x} and holds {} elements: it would run past the top of the address space",
            buffer.addr, buffer.len
        ));
    }
    // An empty matrix is never read or written, whatever its leading dimension.
    if rows > 0 && cols > 0 && ld < cols {
        return Err(format!("{ld_name} = {ld} is less than {}, the length of a stored row of {name} ({layout})", cols.max(1)));
    }
    if *problems == 0 {
        return Ok(());
    }
    let needed = op.span().ok_or_else(|| format!("{name} spans more elements than an address can hold"))?;
    if buffer.len < needed {
        let strides = op.outer.iter().map(|(name, _, stride)| format!("{name} = {stride}, ")).collect::<String>();
        return Err(format!(
            "{name} holds {} elements, but {}{rows} rows of {cols} with {strides}{ld_name} = {ld} span {needed}",
            buffer.len,
            sides()
        ));
    }
    let all = op
        .batch_span()
        .ok_or_else(|| format!("{name}'s {problems} problems, {stride} elements apart, span more elements than an address can hold"))?;
    if buffer.len < all {
        return Err(format!(
            "{name} holds {} elements, but {problems} problems of {needed} elements, {stride} apart, span {all}",
            buffer.len
        ));
    }
    Ok(())
}

/// Declared names for a message, or "none".
fn known_list<'a>(known: impl Iterator<Item = &'a str>) -> String {
    let known: Vec<&str> = known.collect();
    if known.is_empty() {
        "none".into()
    } else {
        known.join(", ")
    }
}

/// Checks a call against the kernel's family declaration and manifest entry, and makes its
/// launch, in three steps: [`bind`] (every name declared and given once, defaults filled),
/// [`check`] (what this variant takes: applied operands and scalars, batches, multiples,
/// each operand's element type, span within its buffer, leading dimension and alignment,
/// overlaps) and [`lower`] (the arguments from the parameter list, the grid and the shared
/// memory). `None` when no output has an element to write.
pub fn plan_call(built: &Built, call: &Call, sms: u32) -> Result<Option<Launch>, String> {
    let bound = bind(&built.entry.declaration, &built.entry.variant.family, call)?;
    let stored = check(built, &bound)?;
    lower(built, &bound, &stored, sms)
}

/// A call's arguments bound to its family's declaration.
pub(crate) struct Bound<'a> {
    quantities: BTreeMap<&'a str, u64>,
    operands: BTreeMap<&'a str, (Dtype, Buffer)>,
    /// Every declared scalar: given, else its default.
    scalars: BTreeMap<&'a str, f64>,
    /// Problems of a batch: the family's batch quantity, else 1.
    problems: u64,
    /// The axes the call asks for, each a computing axis of the family and one of its values.
    axes: BTreeMap<&'a str, &'a str>,
}

/// Binds a call's names to the family's declaration (`name` its family, for messages): each
/// declared and given at most once; every quantity and scalar without a default and every
/// operand that is not optional given; every scalar finite and in its range. The one statement
/// of these rules: a kernel's plan and a family's chooser both bind through it.
pub(crate) fn bind<'a>(family: &'a Family, name: &str, call: &'a Call) -> Result<Bound<'a>, String> {
    let all = family.all_quantities();
    let operand_names: Vec<&str> = family.operands.iter().map(|o| o.name.as_str()).collect();
    let scalar_names: Vec<&str> = family.scalars.iter().map(|s| s.name.as_str()).collect();
    let unknown = |what: &str, plural: &str, arg: &str, known: &[&str]| {
        format!(
            "the call gives {what} `{arg}`, which a {name} call does not take ({plural} it takes: {})",
            known_list(known.iter().copied())
        )
    };
    let mut quantities: BTreeMap<&str, u64> = BTreeMap::new();
    for (arg, value) in &call.quantities {
        if !all.contains(&arg.as_str()) {
            return Err(unknown("quantity", "quantities", arg, &all));
        }
        if quantities.insert(arg, *value).is_some() {
            return Err(format!("the call gives quantity `{arg}` twice"));
        }
    }
    let mut operands: BTreeMap<&str, (Dtype, Buffer)> = BTreeMap::new();
    for (arg, dtype, buffer) in &call.operands {
        if family.operand(arg).is_none() {
            return Err(unknown("operand", "operands", arg, &operand_names));
        }
        if operands.insert(arg, (*dtype, *buffer)).is_some() {
            return Err(format!("the call gives operand `{arg}` twice"));
        }
    }
    let mut scalars: BTreeMap<&str, f64> = BTreeMap::new();
    for (arg, value) in &call.scalars {
        let Some(decl) = family.scalar(arg) else {
            return Err(unknown("scalar", "scalars", arg, &scalar_names));
        };
        if scalars.insert(arg, *value).is_some() {
            return Err(format!("the call gives scalar `{arg}` twice"));
        }
        let (lo, hi) = decl.bounds();
        if !value.is_finite() {
            return Err(format!("scalar `{arg}` = {value} is not a finite number"));
        }
        if !(lo..=hi).contains(value) || (decl.ty.is_integer() && value.fract() != 0.0) {
            return Err(format!("scalar `{arg}` = {value} is outside its range {lo}..={hi} ({:?})", decl.ty));
        }
    }
    // A stride only of optional operands the call leaves out describes nothing: 0 if not given.
    let left_out_stride = |q: &str| {
        let mut naming = family.operands.iter().filter(|o| o.stride_names().chain(o.batch_stride.as_deref()).any(|s| s == q)).peekable();
        !family.quantities.iter().any(|own| own == q)
            && naming.peek().is_some()
            && naming.all(|o| o.optional && !operands.contains_key(o.name.as_str()))
    };
    for &q in &all {
        match family.default_quantity(q) {
            _ if quantities.contains_key(q) => {}
            Some(default) => {
                quantities.insert(q, default);
            }
            None if left_out_stride(q) => {
                quantities.insert(q, 0);
            }
            None => return Err(format!("the call does not give quantity `{q}`, which every {name} call gives")),
        }
    }
    if let Some(missing) = family.operands.iter().find(|o| !o.optional && !operands.contains_key(o.name.as_str())) {
        return Err(format!("the call does not pass operand `{}`, which every {name} call passes", missing.name));
    }
    for decl in &family.scalars {
        match decl.default {
            _ if scalars.contains_key(decl.name.as_str()) => {}
            Some(default) => {
                scalars.insert(&decl.name, default);
            }
            None => return Err(format!("the call does not give scalar `{}`, which every {name} call gives", decl.name)),
        }
    }
    for rule in &family.rules {
        rule.check(&|q| quantities.get(q).copied())?;
    }
    let problems = family.batch.as_deref().and_then(|b| quantities.get(b)).copied().unwrap_or(1);
    let mut axes: BTreeMap<&str, &str> = BTreeMap::new();
    for (arg, value) in &call.axes {
        let Some(decl) = family.axes.iter().find(|a| a.name == *arg) else {
            let computing: Vec<&str> = family.computing_axes().map(|a| a.name.as_str()).collect();
            return Err(unknown("axis", "axes", arg, &computing));
        };
        if decl.tuning {
            return Err(format!(
                "the call asks for axis `{arg}`, which changes how a {name} variant computes, not what: the chooser picks it (name a variant to run one)"
            ));
        }
        if !decl.admits(value) {
            return Err(format!("the call asks for {arg} = {value}, which is not a value of axis `{arg}` ({})", decl.describe_values()));
        }
        if axes.insert(arg, value).is_some() {
            return Err(format!("the call asks for axis `{arg}` twice"));
        }
    }
    Ok(Bound { quantities, operands, scalars, problems, axes })
}

/// Checks a bound call against what this variant takes, and each operand as stored against
/// its buffer; the operands as stored, by name.
fn check<'a>(built: &'a Built, bound: &Bound<'a>) -> Result<BTreeMap<&'a str, Stored>, String> {
    let entry = &built.entry;
    let family = &entry.declaration;
    let variant = &entry.variant;
    let Bound { quantities, operands, scalars, problems, axes } = bound;
    let problems = *problems;
    for (&axis, &value) in axes {
        if let Some(own) = variant.value(axis).map(|v| v.to_string()).filter(|own| own != value) {
            return Err(format!("the call asks for {axis} = {value}; {} computes {axis} = {own}", variant.name));
        }
    }
    // What the variant takes; an optional operand or a defaulted scalar it does not take is
    // refused when the call asks for it, rather than silently left out.
    let takes_operand = |name: &str| entry.launch.takes_operand(name);
    if let Some(batch) = family.batch.as_deref() {
        if problems > 1 && !entry.launch.takes_quantity(batch) {
            return Err(format!(
                "the call gives {batch} = {problems} problems, but this variant computes one at a time: pick a variant that walks a batch"
            ));
        }
    }
    let applied = |axis_note: String| if axis_note.is_empty() { String::new() } else { format!(" ({axis_note})") };
    let own_axes =
        || family.axes.iter().filter_map(|a| Some(format!("{} {}", a.name, variant.word(&a.name)?))).collect::<Vec<_>>().join(", ");
    if let Some(name) = operands.keys().find(|name| !takes_operand(name)) {
        return Err(format!(
            "the call passes `{name}`, which this variant does not apply{}: pick a variant that takes it, or leave it out",
            applied(own_axes())
        ));
    }
    for (&name, &value) in scalars {
        let default = family.scalar(name).and_then(|decl| decl.default);
        if !entry.launch.takes_scalar(name) && default != Some(value) {
            return Err(format!(
                "the call passes {name} = {value}, but this variant does not apply `{name}`{} and computes with {name} = {}: pick a variant that takes it",
                applied(own_axes()),
                default.unwrap_or(f64::NAN)
            ));
        }
    }

    let requires = &entry.requires;
    for rule in &requires.rules {
        rule.check(&|q| quantities.get(q).copied())?;
    }
    for (quantity, &multiple) in &requires.multiples {
        let Some(&value) = quantities.get(quantity.as_str()) else {
            return Err(format!("it requires a multiple of `{quantity}`, which a call does not give"));
        };
        if value.checked_rem(u64::from(multiple)) != Some(0) {
            return Err(format!(
                "{quantity} = {value} is not a multiple of {multiple}: {} variants take tile multiples only; use a checked variant",
                variant.bounds
            ));
        }
    }

    // A quantity past what the kernel's parameter holds is named first, before the spans it
    // makes overflow an address.
    for param in &entry.launch.params {
        if let ParamKind::I32 { value } = &param.kind {
            if let Some(&given) = quantities.get(value.as_str()) {
                as_i32(value, given, &param.name)?;
            }
        }
    }
    let env = |name: &str| quantities.get(name).copied();
    let mut stored: BTreeMap<&str, Stored> = BTreeMap::new();
    for decl in &family.operands {
        let Some(&(dtype, buffer)) = operands.get(decl.name.as_str()) else { continue };
        let expected = family.operand_dtype(variant, decl);
        if dtype != expected {
            return Err(format!("it takes {expected} elements for {}, but the buffer holds {dtype}", decl.name));
        }
        let shape = family.stored(variant, decl, &env)?;
        let size = |v: u64| usize::try_from(v).map_err(|_| format!("{} has a side of {v} elements, more than an address holds", decl.name));
        let (rows, cols, ld, layout) = (size(shape.rows)?, size(shape.cols)?, size(shape.ld)?, shape.layout);
        let ld_name = decl.stride_names().last().map_or_else(|| "its length".to_string(), str::to_string);
        let outer = shape
            .outer
            .iter()
            .zip(decl.stride_names())
            .map(|(&(count, stride), name)| Ok((name.to_string(), size(count)?, size(stride)?)))
            .collect::<Result<Vec<_>, String>>()?;
        if let [length] = &decl.dims[..] {
            if buffer.len < cols {
                return Err(format!("{} holds {} elements, but it takes {length} = {cols} of them", decl.name, buffer.len));
            }
        }
        // Strides matter only between problems; with one, the operand is one matrix.
        let stride = match decl.batch_stride.as_deref() {
            Some(name) if problems > 1 => size(env(name).unwrap_or(0))?,
            _ => 0,
        };
        let op =
            Stored { name: decl.name.clone(), ld_name, buffer, rows, cols, ld, outer, layout, dtype, problems: size(problems)?, stride };
        if buffer.addr == 0 && op.span() != Some(0) {
            return Err(format!(
                "{} is at address 0, a null pointer: pass its buffer{}",
                decl.name,
                if decl.optional { ", or leave the optional operand out" } else { "" }
            ));
        }
        check_stored(&op)?;
        if let Some((side, stride, extent)) = op.self_overlap().filter(|_| decl.access.writes()) {
            return Err(format!(
                "{side} = {stride}: the kernel writes {}, and the sides with smaller strides span {extent} elements, so two of its indices would name one element; {side} must be at least {extent}",
                decl.name
            ));
        }
        if let (Some(name), true) = (decl.batch_stride.as_deref(), problems > 1) {
            let one = op.span().unwrap_or(usize::MAX);
            if decl.access.writes() && stride < one && one > 0 {
                return Err(format!(
                    "{name} = {stride}: the {problems} problems' {} would overlap, each spanning {one} elements; {name} must be at least {one}",
                    decl.name
                ));
            }
        }
        let strides = op.outer.iter().map(|(name, _, stride)| (name.as_str(), *stride)).chain([(op.ld_name.as_str(), ld)]);
        for (name, stride) in strides.filter(|_| decl.stride_names().next().is_some()) {
            if stride.checked_rem(requires.ld_multiple as usize) != Some(0) {
                return Err(format!(
                    "{name} = {stride} is not a multiple of {} elements, as this {} variant assumes (16-byte rows)",
                    requires.ld_multiple, variant.bounds
                ));
            }
        }
        let own = requires.operand_align_bytes.get(&decl.name).copied().unwrap_or(1);
        let align = u64::from(requires.ptr_align_bytes.max(dtype.size_bytes()).max(decl.align.unwrap_or(1)).max(own));
        if buffer.addr % align != 0 {
            return Err(format!("{} starts at {:#x}, which is not {align}-byte aligned", decl.name, buffer.addr));
        }
        // In u128: a stride of near usize::MAX elements, which a buffer as long may hold, overflows u64 bytes.
        let stride_bytes = op.stride as u128 * u128::from(dtype.size_bytes());
        if let (Some(name), false) = (decl.batch_stride.as_deref(), stride_bytes.is_multiple_of(u128::from(align))) {
            return Err(format!(
                "{name} = {} elements puts the {} of problem 1 {stride_bytes} bytes on, which is not {align}-byte aligned as this {} variant needs",
                op.stride, decl.name, variant.bounds
            ));
        }
        stored.insert(&decl.name, op);
    }
    // A kernel reads its inputs while it writes its outputs: what it writes shares memory with
    // no other operand (an operand updated in place is one operand, passed once).
    let access = |o: &Stored| family.operand(&o.name).map_or(Access::Read, |d| d.access);
    for (index, written) in stored.values().enumerate().filter(|(_, o)| access(o).writes()) {
        for other in stored.values().enumerate().filter(|&(i, o)| i != index && (i > index || !access(o).writes())).map(|(_, o)| o) {
            let ((ws, we), (os, oe)) = (written.bytes(), other.bytes());
            if ws < we && os < oe && ws < oe && os < we {
                let does = if access(other).writes() { "also writes" } else { "reads" };
                return Err(format!(
                    "{} (bytes {os:#x}..{oe:#x}) overlaps {} (bytes {ws:#x}..{we:#x}), which the kernel writes while it {does} {}",
                    other.name, written.name, other.name
                ));
            }
        }
    }

    Ok(stored)
}

/// The launch of a checked call: its arguments from the variant's parameter list, its grid and
/// its shared memory; `None` where no output has an element to write.
fn lower(built: &Built, bound: &Bound<'_>, stored: &BTreeMap<&str, Stored>, sms: u32) -> Result<Option<Launch>, String> {
    let entry = &built.entry;
    let family = &entry.declaration;
    let Bound { quantities, scalars, problems, .. } = bound;
    let problems = *problems;
    let env = |name: &str| quantities.get(name).copied();
    // Entries are checked when read; a parameter naming what the family lacks is refused anyway.
    let missing = |param: &str, what: &str| format!("its parameter `{param}` wants {what}, which this call does not give");
    let args = entry
        .launch
        .params
        .iter()
        .map(|param| match &param.kind {
            ParamKind::Pointer { operand, .. } => match stored.get(operand.as_str()) {
                Some(o) => Ok(Arg::Pointer(o.buffer.addr)),
                // Left out of the call: the kernel sees a null pointer.
                None if family.operand(operand).is_some_and(|o| o.optional) => Ok(Arg::Pointer(0)),
                None => Err(missing(&param.name, operand)),
            },
            ParamKind::TensorMap { operand, box_, swizzle } => {
                tensor_map(stored.get(operand.as_str()).ok_or_else(|| missing(&param.name, operand))?, box_, *swizzle).map(Arg::TensorMap)
            }
            ParamKind::I64 { value } => {
                let given = *quantities.get(value.as_str()).ok_or_else(|| missing(&param.name, value))?;
                i64::try_from(given)
                    .map(Arg::I64)
                    .map_err(|_| format!("{value} = {given} does not fit the kernel's 64-bit parameter `{}`", param.name))
            }
            ParamKind::I32 { value } => {
                let given = *quantities.get(value.as_str()).ok_or_else(|| missing(&param.name, value))?;
                as_i32(value, given, &param.name).map(Arg::I32)
            }
            ParamKind::Workspace { bytes, zeroed } => {
                let bytes = bytes.eval(&with_sms(&env, sms)).map_err(|rule| format!("its workspace `{}`: {rule}", param.name))?;
                if bytes > MAX_WORKSPACE_BYTES {
                    return Err(format!(
                        "its workspace `{}` would take {bytes} bytes for this call, over the {MAX_WORKSPACE_BYTES} the runtime allocates",
                        param.name
                    ));
                }
                Ok(Arg::Workspace { bytes, zeroed: *zeroed })
            }
            ParamKind::Scalar { scalar } => {
                let value = *scalars.get(scalar.as_str()).ok_or_else(|| missing(&param.name, scalar))?;
                Ok(match family.scalar(scalar).map(|s| s.ty) {
                    Some(ScalarType::F64) => Arg::F64(value),
                    Some(ScalarType::I32) => Arg::I32(value as i32),
                    Some(ScalarType::U32) => Arg::U32(value as u32),
                    _ => Arg::F32(value as f32),
                })
            }
        })
        .collect::<Result<Vec<Arg>, String>>()?;

    let writes_nothing = problems == 0
        || stored.values().filter(|s| family.operand(&s.name).is_some_and(|o| o.access.writes())).all(|s| s.span() == Some(0));
    if writes_nothing {
        return Ok(None);
    }
    let spec = &entry.launch;
    let grid = spec.grid_of(family, &env, problems, sms)?;
    let dynamic_smem_bytes = spec
        .dynamic_smem_bytes
        .eval(&env)
        .and_then(|b| u32::try_from(b).map_err(|_| format!("{b} bytes of shared memory")))
        .map_err(|rule| format!("its shared memory: {rule}"))?;
    let persistent = matches!(spec.grid, GridRule::Persistent { .. } | GridRule::Expr { persistent: true, .. });
    let offsets = family
        .operands
        .iter()
        .filter_map(|decl| Some((decl, decl.offsets.as_ref()?, stored.get(decl.name.as_str())?)))
        .map(|(decl, offsets, o)| {
            let (total, longest) = offsets.bounds(&env)?;
            Ok(OffsetsCheck { operand: decl.name.clone(), addr: o.buffer.addr, len: o.cols, total, longest, ends: offsets.ends })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Some(Launch { grid, block: spec.block, cluster: spec.cluster, persistent, dynamic_smem_bytes, args, offsets }))
}

/// TMA's rules for a tensor: a 16-byte-aligned start, each side past the first a multiple of 16
/// bytes apart and less than 2^40, at most 2^32 elements along each side. The box's sides are
/// the operand's, innermost first; one more maps every problem of a batch, and one problem, or
/// a stride of 0 (every problem reads the same operand), has a last side of 1.
fn tensor_map(o: &Stored, box_: &[u32], swizzle_bytes: u32) -> Result<TensorMapArg, String> {
    let name = &o.name;
    let addr = o.buffer.addr;
    if !addr.is_multiple_of(16) {
        return Err(format!("{name} starts at {addr:#x}; TMA needs 16-byte-aligned operands"));
    }
    // (what the stride separates, elements along the side, stride in elements)
    let mut sides = vec![(format!("the rows of {name}"), o.rows, o.ld)];
    sides.extend(
        o.outer.iter().rev().map(|(stride, count, step)| (format!("{stride} = {step}: the indices of {name} along it"), *count, *step)),
    );
    let declared = sides.len() + 1;
    if box_.len() > declared {
        let problems = if o.stride > 0 { o.problems } else { 1 };
        sides.push((format!("the problems of {name}"), problems, o.stride));
    }
    if box_.len() != sides.len() + 1 || box_.len() > MAX_TENSOR_MAP_SIDES {
        return Err(format!(
            "a tensor map of {name} has a box of {} sides; {name} has {declared} (and one more over the problems of a batch), at most {MAX_TENSOR_MAP_SIDES}",
            box_.len()
        ));
    }
    let size = u64::from(o.dtype.size_bytes());
    let mut dims = [1u64; 5];
    let mut strides_bytes = [0u64; 4];
    let mut box_sides = [1u32; 5];
    box_sides[..box_.len()].copy_from_slice(box_);
    dims[0] = o.cols as u64;
    // A side never stepped over takes any valid stride: the one past the sides before it.
    let mut extent = (o.cols as u64).saturating_mul(size).max(16).next_multiple_of(16);
    for (i, (what, count, stride)) in sides.iter().enumerate() {
        let bytes = if *count > 1 {
            let bytes = (*stride as u64).saturating_mul(size);
            if !bytes.is_multiple_of(16) || bytes >= 1 << 40 {
                return Err(format!("{what} are {bytes} bytes apart; TMA needs a multiple of 16 below 2^40"));
            }
            bytes
        } else {
            extent.min((1 << 40) - 16)
        };
        extent = bytes.saturating_mul(*count as u64);
        dims[i + 1] = *count as u64;
        strides_bytes[i] = bytes;
    }
    if let Some(d) = dims.iter().find(|&&d| d > u64::from(u32::MAX)) {
        return Err(format!("{name} has a side of {d} elements as stored; TMA takes at most 2^32 - 1 elements a side"));
    }
    // An empty side is never read (the kernel issues no loads then), but TMA wants at least 1.
    Ok(TensorMapArg {
        addr,
        dtype: o.dtype,
        rank: box_.len() as u32,
        dims: dims.map(|d| d.max(1)),
        strides_bytes,
        box_: box_sides,
        swizzle_bytes,
    })
}

/// Quantity `value` = `given` as the kernel's 32-bit parameter `param`.
fn as_i32(value: &str, given: u64, param: &str) -> Result<i32, String> {
    i32::try_from(given)
        .map_err(|_| format!("{value} = {given} does not fit the kernel's 32-bit parameter `{param}` (at most {})", i32::MAX))
}

/// Whether a fatbin with these targets runs on a GPU of compute capability `device`: SASS of
/// the same major version and no newer minor, or PTX no newer than the device; `a` targets
/// (`sm_90a`) run on exactly their own architecture.
pub fn runs_on(targets: &Targets, device: (u32, u32)) -> bool {
    let sass = targets.sass.iter().any(|sass| match compute_capability(sass) {
        Some(cc) if sass.ends_with('a') => cc == device,
        Some((major, minor)) => major == device.0 && minor <= device.1,
        None => false,
    });
    let ptx = match compute_capability(&targets.ptx) {
        Some(cc) if targets.ptx.ends_with('a') => cc == device,
        Some(cc) => cc <= device,
        None => false,
    };
    sass || ptx
}
