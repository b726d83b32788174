//! Trials of any family made from its declaration: shapes from its quantities and tiles,
//! random inputs per operand, poisoned outputs with guard rows, its reference variant run on
//! the GPU beside the variant, and its perf baseline (a device copy of the bytes it moves).

use crate::device::{download, median_ms, medians_ms, rotation, upload};
use crate::host::relative_error;
use crate::report::Record;
use cudarc::driver::CudaSlice;
use half::{bf16, f16};
use rand::Rng;
use std::collections::BTreeMap;
use tilesmith_runtime::{
    check_block_smem, plan_call, Buffer, Call, CallBuilder, Chooser, Dtype, Element, Error, Gpu, Kernel, Pick, Registry, Target, F8E4M3,
    F8E5M2,
};
use tilesmith_spec::family::{Family, Law, Offsets, OperandDecl, Values};
use tilesmith_spec::{Access, Entry};

/// A call's quantities, shape and leading dimensions, by name.
pub type Shape = BTreeMap<String, u64>;

const WARMUP: usize = 5;
const RUNS: usize = 25;
/// Timed inputs repeat a random block of this many elements (odd, so that rows do not line up
/// with it).
const REPEAT: usize = (1 << 20) + 3;
/// Elements of each timed output compared with the reference (the start of the buffer).
const SAMPLED: usize = 1 << 22;

/// A device buffer of any element type the kernels take.
pub enum Buf {
    F32(CudaSlice<f32>),
    F16(CudaSlice<f16>),
    Bf16(CudaSlice<bf16>),
    E4m3(CudaSlice<F8E4M3>),
    E5m2(CudaSlice<F8E5M2>),
    I32(CudaSlice<i32>),
    I64(CudaSlice<i64>),
    U32(CudaSlice<u32>),
    U8(CudaSlice<u8>),
}

/// Runs `$body` with `$s` bound to the slice inside `$buf`, whatever its element type.
macro_rules! each {
    ($buf:expr, $s:ident => $body:expr) => {
        match $buf {
            Buf::F32($s) => $body,
            Buf::F16($s) => $body,
            Buf::Bf16($s) => $body,
            Buf::E4m3($s) => $body,
            Buf::E5m2($s) => $body,
            Buf::I32($s) => $body,
            Buf::I64($s) => $body,
            Buf::U32($s) => $body,
            Buf::U8($s) => $body,
        }
    };
}

/// `values` as elements of T on the GPU; NaN stands for the poison.
fn to_device<T: Element>(gpu: &Gpu, values: &[f64]) -> Result<CudaSlice<T>, String> {
    let host: Vec<T> = values.iter().map(|&v| if v.is_nan() { T::POISON } else { T::from_f64(v) }).collect();
    upload(gpu, &host)
}

fn to_host<T: Element>(gpu: &Gpu, slice: &CudaSlice<T>, len: usize) -> Result<Vec<f64>, String> {
    let host = download(gpu, &slice.slice(..len.min(slice.len())))?;
    // Poison reads as NaN, whatever the type: an element left unwritten.
    Ok(host.into_iter().map(|v| if v.is_poison() { f64::NAN } else { v.to_f64() }).collect())
}

impl Buf {
    /// `values` converted to `dtype` and copied to the GPU.
    pub fn upload(gpu: &Gpu, dtype: Dtype, values: &[f64]) -> Result<Buf, String> {
        Ok(match dtype {
            Dtype::F32 => Buf::F32(to_device(gpu, values)?),
            Dtype::F16 => Buf::F16(to_device(gpu, values)?),
            Dtype::Bf16 => Buf::Bf16(to_device(gpu, values)?),
            Dtype::E4m3 => Buf::E4m3(to_device(gpu, values)?),
            Dtype::E5m2 => Buf::E5m2(to_device(gpu, values)?),
            Dtype::I32 => Buf::I32(to_device(gpu, values)?),
            Dtype::I64 => Buf::I64(to_device(gpu, values)?),
            Dtype::U32 => Buf::U32(to_device(gpu, values)?),
            Dtype::U8 => Buf::U8(to_device(gpu, values)?),
        })
    }

    pub fn download(&self, gpu: &Gpu) -> Result<Vec<f64>, String> {
        self.download_prefix(gpu, usize::MAX)
    }

    /// The first `len` elements (all, where it holds fewer).
    pub fn download_prefix(&self, gpu: &Gpu, len: usize) -> Result<Vec<f64>, String> {
        each!(self, s => to_host(gpu, s, len))
    }

    /// A copy made on the GPU.
    pub fn copy(&self, gpu: &Gpu) -> Result<Buf, String> {
        let stream = gpu.stream();
        let err = |e: cudarc::driver::DriverError| format!("copying on the GPU: {e}");
        macro_rules! copies {
            ($($v:ident),+) => {
                match self { $(Buf::$v(s) => Buf::$v(stream.clone_dtod(s).map_err(err)?)),+ }
            };
        }
        Ok(copies!(F32, F16, Bf16, E4m3, E5m2, I32, I64, U32, U8))
    }

    fn bind<'a, T: Target>(&'a self, call: CallBuilder<'a, T>, name: &str) -> CallBuilder<'a, T> {
        each!(self, s => call.operand(name, s))
    }

    fn bind_mut<'a, T: Target>(&'a mut self, call: CallBuilder<'a, T>, name: &str) -> CallBuilder<'a, T> {
        each!(self, s => call.operand_mut(name, s))
    }
}

/// One operand as stored for a shape.
#[derive(Clone, Debug)]
pub struct Stored {
    pub decl: OperandDecl,
    pub dtype: Dtype,
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    /// The sides before the rows, of an operand of more than two: (count, stride), outermost
    /// first.
    pub outer: Vec<(usize, usize)>,
}

impl Stored {
    /// Elements it spans.
    pub fn span(&self) -> usize {
        if self.rows == 0 || self.cols == 0 || self.outer.iter().any(|(count, _)| *count == 0) {
            0
        } else {
            self.outer.iter().map(|(count, stride)| (count - 1) * stride).sum::<usize>() + (self.rows - 1) * self.ld + self.cols
        }
    }

    /// Which of the first `len` elements it stores lie in its region (rather than between its
    /// rows, or between the blocks of its outer sides).
    pub fn region_mask(&self, len: usize) -> Vec<bool> {
        let mut mask = vec![false; len];
        // Offsets of every index of the outer sides.
        let mut starts = vec![0usize];
        for &(count, stride) in &self.outer {
            starts = starts.iter().flat_map(|s| (0..count).map(move |i| s + i * stride)).collect();
        }
        for start in starts {
            for row in 0..self.rows {
                let first = start + row * self.ld;
                mask.iter_mut().skip(first).take(self.cols).for_each(|m| *m = true);
            }
        }
        mask
    }

    /// NaN elements past the end of an output, 64 rows and a bit: a write past the last row,
    /// or a partial row, shows up there as one outside the output.
    fn guard(&self) -> usize {
        64 * self.ld + 64
    }
}

/// The entries of `values` that are the family's shape quantities (not leading dimensions, not
/// names it lacks).
pub fn shape_of(family: &Family, values: &BTreeMap<String, u64>) -> Shape {
    values.iter().filter(|(q, _)| family.quantities.contains(q)).map(|(q, v)| (q.clone(), *v)).collect()
}

/// Whether `shape` keeps the family's rules and the variant's own.
fn keeps_rules(entry: &tilesmith_spec::Entry, shape: &Shape) -> bool {
    entry.declaration.rules.iter().chain(&entry.requires.rules).all(|rule| rule.check(&lookup(shape)).is_ok())
}

fn lookup(shape: &Shape) -> impl Fn(&str) -> Option<u64> + '_ {
    move |name| shape.get(name).copied()
}

/// The operands a call of `entry`'s variant passes, as stored for `shape` (rows of a
/// column-major operand are its columns; a vector is one row).
pub fn stored(entry: &Entry, shape: &Shape) -> Result<Vec<Stored>, String> {
    let (family, variant) = (&entry.declaration, &entry.variant);
    family
        .operands
        .iter()
        // An optional input the variant does not take (e4m3's scales beside a bf16 variant) is
        // one a call of it must leave out.
        .filter(|decl| !decl.optional || decl.access.writes() || entry.launch.takes_operand(&decl.name))
        .map(|decl| {
            // Leading dimensions not chosen yet are taken as the row length.
            let quantity = |name: &str| Some(shape.get(name).copied().unwrap_or(0));
            let s = family.stored(variant, decl, &quantity)?;
            let ld = if s.ld == 0 { s.cols } else { s.ld };
            Ok(Stored {
                decl: decl.clone(),
                dtype: family.operand_dtype(variant, decl),
                rows: s.rows as usize,
                cols: s.cols as usize,
                ld: ld as usize,
                outer: s.outer.iter().map(|&(count, stride)| (count as usize, stride as usize)).collect(),
            })
        })
        .collect()
}

/// The family's scalars `entry`'s variant takes: a call of it passes their trial values, and
/// leaves out the others (e4m3's scales beside a bf16 variant), which it would refuse.
pub fn taken_scalars(entry: &Entry) -> Vec<String> {
    entry.declaration.scalars.iter().filter(|s| entry.launch.takes_scalar(&s.name)).map(|s| s.name.clone()).collect()
}

/// `shape` completed with strides: each stored row's length plus `pad`, rounded up to the
/// variant's multiple, and each outer side's stride the span of the sides within it, so
/// rounded.
pub fn with_lds(kernel: &Kernel, mut shape: Shape, pad: u64) -> Result<Shape, String> {
    let step = u64::from(kernel.info().entry.requires.ld_multiple.max(1));
    for op in stored(&kernel.info().entry, &shape)? {
        let names: Vec<&str> = op.decl.stride_names().collect();
        if let Some((row, outer)) = names.split_last() {
            let ld = (op.cols as u64 + pad).max(1).next_multiple_of(step);
            shape.insert(row.to_string(), ld);
            let mut extent = ld * (op.rows as u64).max(1);
            for (name, (count, _)) in outer.iter().zip(&op.outer).rev() {
                let stride = extent.max(1).next_multiple_of(step);
                shape.insert(name.to_string(), stride);
                extent = stride * (*count as u64).max(1);
            }
        }
    }
    Ok(shape)
}

/// The shapes a variant is tried on, from its family's quantities and its tile: every quantity
/// past two tiles (37 without a tile), then each at 1, a tile less one and a tile plus one, a
/// large one (about 2^21 elements, every side odd), then the family's declared shapes; an
/// unchecked variant's are rounded up to its multiples. Marked `true`: a variant may refuse
/// those declared (as past its shared memory), and must refuse those that break a rule. The
/// first keeps to the rules and also comes with padded leading dimensions.
pub fn shapes(kernel: &Kernel) -> Result<Vec<(Shape, bool)>, String> {
    let entry = &kernel.info().entry;
    let (family, variant) = (&entry.declaration, &entry.variant);
    let checked = variant.is_checked();
    let tile = |q: &str| family.tile.iter().position(|t| t == q).map(|i| u64::from(variant.tile[i]));
    let base: Shape = family.quantities.iter().map(|q| (q.clone(), tile(q).map_or(37, |t| 2 * t + 3))).collect();
    let mut raw = vec![(base.clone(), false)];
    for q in &family.quantities {
        let mut values = vec![1];
        if let Some(t) = tile(q) {
            values.extend([t.saturating_sub(1).max(1), t + 1]);
        }
        for v in values {
            let mut shape = base.clone();
            shape.insert(q.clone(), v);
            raw.push((shape, false));
        }
    }
    // Large: about 2^21 elements in all, every quantity odd.
    let side = (2f64.powi(21).powf(1.0 / family.quantities.len() as f64) as u64) | 1;
    raw.push((family.quantities.iter().map(|q| (q.clone(), side)).collect(), false));
    for declared in &family.trials.shapes {
        let mut shape = base.clone();
        shape.extend(shape_of(family, declared));
        raw.push((shape, true));
    }
    let multiples = &entry.requires.multiples;
    // A shape that breaks one of the family's or the variant's rules (head_dim 37 where the
    // variant takes 128) must be refused; the first shape within them leads.
    let breaks = |shape: &Shape| !keeps_rules(entry, shape);
    let mut out: Vec<(Shape, bool)> = Vec::new();
    for (mut shape, declared) in raw {
        if !checked {
            for (q, v) in shape.iter_mut() {
                *v = (*v).max(1).next_multiple_of(u64::from(multiples.get(q).copied().unwrap_or(1)));
            }
        }
        let shape = with_lds(kernel, shape, 0)?;
        if !out.iter().any(|(s, _)| *s == shape) {
            let may_refuse = declared || breaks(&shape);
            out.push((shape, may_refuse));
        }
    }
    let lead = out
        .iter()
        .position(|(shape, _)| !breaks(shape))
        .ok_or(format!("every trial shape of {} breaks one of its rules: declare a shape within them (trials.shapes)", variant.name))?;
    out.swap(0, lead);
    let first = out[0].0.clone();
    let padded = with_lds(kernel, shape_of(family, &first), 13)?;
    if !out.iter().any(|(s, _)| *s == padded) {
        out.push((padded, false));
    }
    Ok(out)
}

/// Buffers for one call: inputs random, outputs poisoned with guard elements.
pub struct Buffers {
    pub ops: Vec<Stored>,
    pub bufs: Vec<Buf>,
}

impl Buffers {
    /// Read operands hold `inputs`; written ones are poisoned, with guard elements past them;
    /// one updated in place holds its inputs, poisoned between its rows and past them.
    pub fn new(gpu: &Gpu, ops: Vec<Stored>, inputs: &BTreeMap<String, Vec<f64>>) -> Result<Buffers, String> {
        let bufs = ops
            .iter()
            .map(|op| match op.decl.access {
                Access::Read => Buf::upload(gpu, op.dtype, &inputs[&op.decl.name]),
                Access::Write => Buf::upload(gpu, op.dtype, &vec![f64::NAN; op.span() + op.guard()]),
                Access::ReadWrite => {
                    let mut values = inputs[&op.decl.name].clone();
                    values.resize(op.span() + op.guard(), f64::NAN);
                    Buf::upload(gpu, op.dtype, &values)
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Buffers { ops, bufs })
    }

    /// Fresh inputs for the operands read, drawn as each declares (`values`; else uniform in
    /// [-1, 1)), as its type holds them; elements between the rows of one updated in place are
    /// NaN (poison), so that a write there shows.
    pub fn random_inputs(ops: &[Stored], shape: &Shape) -> Result<BTreeMap<String, Vec<f64>>, String> {
        Self::random_inputs_repeating(ops, shape, usize::MAX)
    }

    /// As [`Buffers::random_inputs`], each operand a fresh random block of at most `period`
    /// elements repeated: for timing, where making hundreds of millions of random numbers on
    /// the host would take longer than the timing.
    pub fn random_inputs_repeating(ops: &[Stored], shape: &Shape, period: usize) -> Result<BTreeMap<String, Vec<f64>>, String> {
        let mut rng = rand::rng();
        ops.iter()
            .filter(|op| op.decl.access.reads())
            .map(|op| {
                if let Some(offsets) = &op.decl.offsets {
                    return Ok((op.decl.name.clone(), draw_offsets(op, offsets, shape, &mut rng)?));
                }
                let draw = draw(op, shape).map_err(|rule| format!("operand `{}`: values: {rule}", op.decl.name))?;
                let block: Vec<f64> = (0..op.span().min(period)).map(|_| round(op.dtype, draw(&mut rng))).collect();
                let mut values: Vec<f64> = block.iter().copied().cycle().take(op.span()).collect();
                if op.decl.access.writes() {
                    let inside = op.region_mask(values.len());
                    values.iter_mut().zip(inside).filter(|(_, inside)| !inside).for_each(|(v, _)| *v = f64::NAN);
                }
                Ok((op.decl.name.clone(), values))
            })
            .collect()
    }

    /// Whether every operand written holds what [`Buffers::new`] put there: poison, and the
    /// inputs of one updated in place.
    pub fn untouched(&self, gpu: &Gpu, inputs: &BTreeMap<String, Vec<f64>>) -> Result<bool, String> {
        let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
        for (op, got) in self.ops.iter().filter(|op| op.decl.access.writes()).zip(self.outputs(gpu)?) {
            let fine = match inputs.get(&op.decl.name) {
                Some(initial) => {
                    let region = initial.iter().zip(op.region_mask(initial.len())).filter(|(_, inside)| *inside).map(|(v, _)| *v);
                    got.outside == 0 && got.region.iter().zip(region).all(|(a, b)| same(*a, b))
                }
                None => got.unwritten == got.region.len() && got.outside == 0,
            };
            if !fine {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Launches `kernel` on these buffers.
    pub fn launch(&mut self, gpu: &Gpu, kernel: &Kernel, shape: &Shape) -> Result<(), Error> {
        let entry = &kernel.info().entry;
        self.bound(kernel.call(gpu), &entry.declaration, shape, &taken_scalars(entry)).launch()
    }

    /// Launches the call through the family's chooser, asking these computing axes and passing
    /// these scalars (those of the variant the call stands for); returns its pick.
    pub fn launch_chosen(
        &mut self,
        gpu: &Gpu,
        chooser: &Chooser,
        shape: &Shape,
        axes: &[(String, String)],
        scalars: &[String],
    ) -> Result<Pick, Error> {
        let mut call = self.bound(chooser.call(gpu), chooser.declaration(), shape, scalars);
        for (axis, value) in axes {
            call = call.axis(axis, value);
        }
        call.launch()
    }

    /// `call` with these buffers, the shape's quantities and the trial values of `scalars` bound.
    fn bound<'a, T: Target>(
        &'a mut self,
        mut call: CallBuilder<'a, T>,
        family: &Family,
        shape: &Shape,
        scalars: &[String],
    ) -> CallBuilder<'a, T> {
        for (op, buf) in self.ops.iter().zip(self.bufs.iter_mut()) {
            call = match op.decl.access {
                Access::Read => buf.bind(call, &op.decl.name),
                Access::Write | Access::ReadWrite => buf.bind_mut(call, &op.decl.name),
            };
        }
        for (q, v) in shape {
            call = call.quantity(q, *v as usize);
        }
        for scalar in family.scalars.iter().filter(|s| scalars.contains(&s.name)) {
            call = call.scalar(&scalar.name, scalar.trial_value());
        }
        call
    }

    /// Each output's region as f64, with the count of region elements left unwritten and of
    /// elements outside it that were written.
    pub fn outputs(&self, gpu: &Gpu) -> Result<Vec<Output>, String> {
        self.outputs_within(gpu, usize::MAX)
    }

    /// As [`Buffers::outputs`], over the first `len` elements of each output buffer.
    pub fn outputs_within(&self, gpu: &Gpu, len: usize) -> Result<Vec<Output>, String> {
        let written = self.ops.iter().zip(&self.bufs).filter(|(op, _)| op.decl.access.writes());
        written.map(|(op, buf)| each!(buf, s => output(gpu, op, s, len))).collect()
    }
}

/// An output's region and counts, from its elements as stored: poison tells an element left
/// unwritten apart from a NaN the kernel wrote (a declared result, such as a bad index's).
fn output<T: Element>(gpu: &Gpu, op: &Stored, slice: &CudaSlice<T>, len: usize) -> Result<Output, String> {
    let host = download(gpu, &slice.slice(..len.min(slice.len())))?;
    let (mut region, mut unwritten, mut outside) = (Vec::with_capacity(op.rows * op.cols), 0, 0);
    let inside = op.region_mask(host.len());
    for (value, inside) in host.into_iter().zip(inside) {
        if inside {
            unwritten += usize::from(value.is_poison());
            region.push(if value.is_poison() { f64::NAN } else { value.to_f64() });
        } else if !value.is_poison() {
            outside += 1;
        }
    }
    Ok(Output { name: op.decl.name.clone(), region, unwritten, outside })
}

/// How to draw `op`'s trial values for `shape`: its declared law, else uniform in [-1, 1).
fn draw(op: &Stored, shape: &Shape) -> Result<impl Fn(&mut rand::rngs::ThreadRng) -> f64, String> {
    let values = op.decl.values.clone().unwrap_or(Values { uniform: Some([-1.0, 1.0]), ..Values::default() });
    let law = values.law(op.dtype, &lookup(shape))?;
    let dtype = op.dtype;
    Ok(move |rng: &mut rand::rngs::ThreadRng| {
        if let (Some(ignore), Some(fraction)) = (values.ignore, values.ignore_fraction) {
            if rng.random_bool(fraction) {
                return ignore;
            }
        }
        match law {
            Law::Uniform { lo, hi } => rng.random_range(lo..hi),
            // Box and Muller's transform of two uniform draws.
            Law::Normal { mean, std } => {
                let (u, v): (f64, f64) = (1.0 - rng.random::<f64>(), rng.random());
                mean + std * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
            }
            Law::Integers { lo, hi } if values.outside_fraction.is_some_and(|f| rng.random_bool(f)) => {
                // Just outside, and far outside (as far as the type holds).
                let far = dtype.integer_range().map_or(hi * 2.0, |(_, max)| max.min(hi * 1024.0));
                [lo - 1.0, hi, (hi + 1.0).min(far), far][rng.random_range(0..4)]
            }
            Law::Integers { lo, hi } => rng.random_range(lo..hi).floor(),
        }
    })
}

/// Offsets for `op` on `shape` ([`Offsets::draw`]): pieces of random lengths filling the
/// declared total, each at most the longest.
fn draw_offsets(op: &Stored, offsets: &Offsets, shape: &Shape, rng: &mut rand::rngs::ThreadRng) -> Result<Vec<f64>, String> {
    let name = &op.decl.name;
    let (total, longest) = offsets.bounds(&lookup(shape))?;
    let pieces = offsets.pieces(op.span() as u64);
    let drawn = Offsets::draw(pieces, total, longest, &mut |lo, hi| rng.random_range(lo..=hi))
        .ok_or_else(|| format!("operand `{name}`: {pieces} pieces of at most {longest:?} elements cannot fill {total}"))?;
    // The leading 0 is implied where the operand holds the ends only.
    Ok(drawn.into_iter().skip(usize::from(offsets.ends)).map(|v| v as f64).collect())
}

/// An output operand after a call: its region's values, how many of them were left unwritten
/// (NaN), and how many elements outside the region were written.
pub struct Output {
    pub name: String,
    pub region: Vec<f64>,
    pub unwritten: usize,
    pub outside: usize,
}

/// `x` as an element of `dtype` holds it.
fn round(dtype: Dtype, x: f64) -> f64 {
    crate::with_element!(dtype, T => T::from_f64(x).to_f64())
}

/// The axes a call of `kernel` states: its values of the family's computing axes (attention's
/// `causal`), which the chooser matches.
pub fn call_axes(kernel: &Kernel) -> Vec<(String, String)> {
    let entry = &kernel.info().entry;
    let (family, variant) = (&entry.declaration, &entry.variant);
    family.computing_axes().filter_map(|a| Some((a.name.clone(), variant.value(&a.name)?.to_string()))).collect()
}

/// The first of `items` for each call they answer (`call` gives an item's [`call_axes`]), in
/// order: one row or one best per question asked of a shape (attention's masked and unmasked).
pub fn first_per_call<T>(items: impl IntoIterator<Item = T>, call: impl Fn(&T) -> Vec<(String, String)>) -> Vec<T> {
    let mut calls = Vec::new();
    let mut firsts = Vec::new();
    for item in items {
        let asked = call(&item);
        if !calls.contains(&asked) {
            calls.push(asked);
            firsts.push(item);
        }
    }
    firsts
}

/// The family's reference variant for `kernel`: of its reference backend, the same dtype and
/// the family's own axes, checked.
pub fn reference<'r>(registry: &'r Registry, kernel: &Kernel) -> Result<&'r Kernel, String> {
    reference_of(registry, kernel, kernel.variant().dtype)
}

/// As [`reference`], of `dtype`: the f32 one stands for the exact results of 16-bit variants.
fn reference_of<'r>(registry: &'r Registry, kernel: &Kernel, dtype: Dtype) -> Result<&'r Kernel, String> {
    let family = &kernel.info().entry.declaration;
    let v = kernel.variant();
    let backend = family.reference.backend.as_deref().ok_or("the family's reference is a library, not a variant")?;
    registry
        .kernels()
        .find(|k| k.info().entry.is_reference_for(v, dtype))
        .ok_or(format!(
            "the registry has no reference variant for {} (family {}, backend `{backend}`, dtype {dtype}, checked): declare one in variants.toml; `build --kernels` builds it with the variants it checks",
            v.name, v.family
        ))
}

/// Every output element of `mine` within `ulps` units in the last place of its type of the
/// exact result: the family's reference variant of dtype `exact_dtype`, computed in f64, on the
/// same inputs. Returns the largest distance found.
fn check_ulps(
    gpu: &Gpu,
    registry: &Registry,
    kernel: &Kernel,
    shape: &Shape,
    inputs: &BTreeMap<String, Vec<f64>>,
    mine: &Buffers,
    (ulps, exact_dtype): (f64, Dtype),
) -> Result<f64, String> {
    let exact = reference_of(registry, kernel, exact_dtype)?;
    let mut theirs = Buffers::new(gpu, stored(&exact.info().entry, shape)?, inputs)?;
    theirs.launch(gpu, exact, shape).map_err(|e| format!("the reference {}: {e}", exact.name()))?;
    gpu.synchronize().map_err(|e| e.to_string())?;
    let mut worst: f64 = 0.0;
    for (got, want) in mine.outputs(gpu)?.into_iter().zip(theirs.outputs(gpu)?) {
        let dtype = mine.ops.iter().find(|op| op.decl.name == got.name).map_or(kernel.variant().dtype, |op| op.dtype);
        let distances: Vec<f64> = got
            .region
            .iter()
            .zip(&want.region)
            .map(|(g, w)| if g == w || (g.is_nan() && w.is_nan()) { 0.0 } else { (g - w).abs() / dtype.ulp(*w) })
            .collect();
        let over: Vec<(usize, f64)> = distances.iter().copied().enumerate().filter(|(_, d)| d.is_nan() || *d > ulps).collect();
        if let Some(&(index, d)) = over.first() {
            return Err(format!(
                "{}: {} of {} elements more than {ulps} ulp of {dtype} from the exact result ({}), e.g. element {index}: {} where \
                 the exact result is {} ({d:.2} ulp); a result rounded twice does this",
                got.name,
                over.len(),
                got.region.len(),
                exact.name(),
                got.region[index],
                want.region[index]
            ));
        }
        worst = distances.into_iter().fold(worst, f64::max);
    }
    Ok(worst)
}

/// The declared tolerance for `kernel` on `shape` ([`Family::tolerance`]).
pub fn tolerance(kernel: &Kernel, shape: &Shape) -> Result<f64, String> {
    kernel.info().entry.declaration.tolerance(kernel.variant().dtype, &lookup(shape))
}

fn describe(shape: &Shape) -> String {
    shape.iter().map(|(q, v)| format!("{q} {v}")).collect::<Vec<_>>().join(", ")
}

/// Correctness from the declaration: on every shape, fresh inputs, the variant and its
/// reference on them, every output element written, nothing outside it, the relative error
/// within the tolerance; then a call the variant must refuse.
pub fn correctness(gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<String, String> {
    let reference = reference(registry, kernel)?;
    let family = &kernel.info().entry.declaration;
    let shapes = shapes(kernel)?;
    let mut worst: f64 = 0.0;
    let mut worst_ulps: Option<f64> = None;
    let mut refused = Vec::new();
    let mut left_out = String::new();
    for (shape, may_refuse) in &shapes {
        let what = describe(shape);
        let ops = stored(&kernel.info().entry, shape)?;
        let inputs = Buffers::random_inputs(&ops, shape)?;
        let mut mine = Buffers::new(gpu, ops.clone(), &inputs)?;
        let mut theirs = Buffers::new(gpu, stored(&reference.info().entry, shape)?, &inputs)?;
        match mine.launch(gpu, kernel, shape) {
            Err(Error::Refused { rule, .. }) if *may_refuse => {
                if !mine.untouched(gpu, &inputs)? {
                    return Err(format!("{what}: refused ({rule}) but an output was written"));
                }
                refused.push(format!("{what} ({rule})"));
                continue;
            }
            other => other.map_err(|e| format!("{what}: {e}"))?,
        }
        theirs.launch(gpu, reference, shape).map_err(|e| format!("{what}: the reference {}: {e}", reference.name()))?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        let tolerance = tolerance(kernel, shape)?;
        let want = theirs.outputs(gpu)?;
        let relative_to = &family.reference.relative_to;
        worst = worst.max(compare(&what, reference.name(), mine.outputs(gpu)?, &want, tolerance, relative_to)?);
        // Once, the call that leaves the optional outputs out: the kernel gets null pointers
        // for them and must still write the rest, as the reference does on the same call (where
        // an output left out sends a result elsewhere: a gradient written in place).
        let optional = |op: &Stored| op.decl.optional && op.decl.access.writes();
        if left_out.is_empty() && ops.iter().any(optional) {
            left_out = ops.iter().filter(|op| optional(op)).map(|op| op.decl.name.clone()).collect::<Vec<_>>().join(", ");
            let what = format!("{what} with {left_out} left out");
            let lean_of = |ops: Vec<Stored>| Buffers::new(gpu, ops.into_iter().filter(|op| !optional(op)).collect(), &inputs);
            let (mut lean, mut lean_theirs) = (lean_of(ops.clone())?, lean_of(stored(&reference.info().entry, shape)?)?);
            lean.launch(gpu, kernel, shape).map_err(|e| format!("{what}: {e}"))?;
            lean_theirs.launch(gpu, reference, shape).map_err(|e| format!("{what}: the reference {}: {e}", reference.name()))?;
            gpu.synchronize().map_err(|e| e.to_string())?;
            let want = lean_theirs.outputs(gpu)?;
            worst = worst.max(compare(&what, reference.name(), lean.outputs(gpu)?, &want, tolerance, relative_to)?);
        }
        if let Some(check) = kernel.info().entry.exact_check() {
            let distance = check_ulps(gpu, registry, kernel, shape, &inputs, &mine, check).map_err(|e| format!("{what}: {e}"))?;
            worst_ulps = Some(worst_ulps.unwrap_or(0.0f64).max(distance));
        }
    }
    let refusal =
        std::iter::once(refusal(gpu, kernel, &shapes[0].0)?).chain(bad_offsets(gpu, kernel, &shapes[0].0)?).collect::<Vec<_>>().join("; ");
    let tried = shapes.len() - refused.len();
    let limits = if refused.is_empty() { String::new() } else { format!("; past its limits, refused: {}", refused.join("; ")) };
    let ulps = worst_ulps.map_or(String::new(), |u| format!(", every element within {u:.3} ulp of the exact result"));
    let lean = if left_out.is_empty() { String::new() } else { format!(" (once more with {left_out} left out)") };
    Ok(format!(
        "{tried} shapes{lean} against {}, worst relative error {worst:.2e}{ulps}; refused as it must: {refusal}{limits}",
        reference.name()
    ))
}

/// The worst relative error of each output in `got` against the reference's of the same name
/// in `outputs` ([`output_error`]); an error where an element is left unwritten, written outside its output, or off
/// by more than `tolerance`.
fn compare(
    what: &str,
    reference: &str,
    got: Vec<Output>,
    outputs: &[Output],
    tolerance: f64,
    relative_to: &BTreeMap<String, String>,
) -> Result<f64, String> {
    let mut worst: f64 = 0.0;
    for got in got {
        let name = &got.name;
        let want = outputs.iter().find(|w| w.name == got.name).ok_or(format!("{what}: the reference has no output {name}"))?;
        if got.unwritten > 0 || got.outside > 0 {
            return Err(format!(
                "{what}: {} of {} elements of {name} left unwritten, {} written outside it",
                got.unwritten,
                got.region.len(),
                got.outside
            ));
        }
        if want.unwritten > 0 {
            return Err(format!("{what}: the reference {reference} left {} elements of {name} unwritten", want.unwritten));
        }
        let error = output_error(&got, want, outputs, relative_to);
        if error > tolerance {
            return Err(format!("{what}: {name}: relative error {error:.3e} against {reference} over the {tolerance:.1e} allowed"));
        }
        worst = worst.max(error);
    }
    Ok(worst)
}

/// The relative (Frobenius) error of `got` against `want`, the reference's output of its name;
/// for an output the family declares `relative_to` another, against the larger of the two
/// reference outputs' magnitudes.
fn output_error(got: &Output, want: &Output, outputs: &[Output], relative_to: &BTreeMap<String, String>) -> f64 {
    let error = relative_error(&got.region, &want.region);
    let Some(scale) = relative_to.get(&got.name).and_then(|other| outputs.iter().find(|w| w.name == *other)) else { return error };
    let norm = |v: &mut dyn Iterator<Item = f64>| v.filter(|x| x.is_finite()).map(|x| x * x).sum::<f64>().sqrt();
    let larger = norm(&mut scale.region.iter().copied()).max(norm(&mut want.region.iter().copied()));
    if !error.is_finite() || larger == 0.0 {
        return error;
    }
    norm(&mut got.region.iter().zip(&want.region).filter(|(_, w)| w.is_finite()).map(|(g, w)| g - w)) / larger
}

/// A call the variant must refuse, which must write nothing: an output one element short for
/// a checked variant, a quantity off its multiple for an unchecked one.
fn refusal(gpu: &Gpu, kernel: &Kernel, good: &Shape) -> Result<String, String> {
    let entry = &kernel.info().entry;
    let (family, variant) = (&entry.declaration, &entry.variant);
    let (shape, short) = match entry.requires.multiples.iter().find(|(_, m)| **m > 1) {
        Some((q, _)) if !variant.is_checked() => {
            let mut shape = shape_of(family, good);
            *shape.get_mut(q).ok_or(format!("`{q}` is not a shape quantity"))? += 1;
            (with_lds(kernel, shape, 0)?, 0)
        }
        _ => (good.clone(), 1),
    };
    let ops = stored(&kernel.info().entry, &shape)?;
    let output = ops.iter().position(|op| op.decl.access.writes()).ok_or("the family writes no operand")?;
    let inputs = Buffers::random_inputs(&ops, &shape)?;
    let span = ops[output].span();
    let mut buffers = Buffers::new(gpu, ops.clone(), &inputs)?;
    // Exactly the span, less `short`: no guard rows to hide an out-of-bounds write in.
    buffers.bufs[output] = Buf::upload(gpu, ops[output].dtype, &vec![f64::NAN; span - short])?;
    match buffers.launch(gpu, kernel, &shape) {
        Err(Error::Refused { rule, .. }) => {
            if buffers.bufs[output].download(gpu)?.iter().all(|x| x.is_nan()) {
                Ok(rule)
            } else {
                Err(format!("refused ({rule}) but {} was written", ops[output].decl.name))
            }
        }
        Err(other) => Err(format!("expected a refusal, got: {other}")),
        Ok(()) => Err(format!("a call with {} launched; it should have been refused", describe(&shape))),
    }
}

/// Calls whose offsets break each of their rules, which the variant must refuse before writing
/// anything: a piece of negative length, an end past the total, a piece longer than the
/// longest (where declared). The rules, as refused.
fn bad_offsets(gpu: &Gpu, kernel: &Kernel, shape: &Shape) -> Result<Vec<String>, String> {
    let entry = &kernel.info().entry;
    let ops = stored(entry, shape)?;
    if ops.iter().all(|op| op.decl.offsets.is_none()) {
        return Ok(Vec::new());
    }
    // One draw of good inputs; each call below breaks one offset of it.
    let good = Buffers::random_inputs(&ops, shape)?;
    let mut rules = Vec::new();
    for op in &ops {
        let Some(offsets) = &op.decl.offsets else { continue };
        let name = &op.decl.name;
        let (total, longest) = offsets.bounds(&lookup(shape))?;
        let n = good[name].len();
        if offsets.pieces(n as u64) == 0 {
            return Err(format!("offsets `{name}` of {n} elements: a trial shape needs at least one piece"));
        }
        // One offset changed: the first piece's end below its start, the last past the total,
        // the first piece too long.
        let first_end = usize::from(!offsets.ends);
        let breaks = [
            ("decreasing", first_end, Some(-1.0)),
            ("past the total", n - 1, Some(total as f64 + 1.0)),
            ("too long", first_end, longest.map(|l| l as f64 + 1.0)),
        ];
        for (what, at, value) in breaks.into_iter().filter_map(|(what, at, v)| Some((what, at, v?))) {
            let mut inputs = good.clone();
            inputs.get_mut(name).ok_or("no offsets drawn")?[at] = value;
            let mut buffers = Buffers::new(gpu, ops.clone(), &inputs)?;
            match buffers.launch(gpu, kernel, shape) {
                Err(Error::Refused { rule, .. }) if buffers.untouched(gpu, &inputs)? => rules.push(rule),
                Err(Error::Refused { rule, .. }) => {
                    return Err(format!("offsets {name} {what}: refused ({rule}) but an output was written"))
                }
                Err(other) => return Err(format!("offsets {name} {what}: expected a refusal, got: {other}")),
                Ok(()) => return Err(format!("offsets {name} {what}: launched; they should have been refused")),
            }
        }
    }
    Ok(rules)
}

/// One problem of a family with a copy baseline, ready to time: input sets rotated past the L2.
pub struct Case {
    pub shape: Shape,
    sets: Vec<Buffers>,
    /// The first set as made, for operands updated in place (which each timed run changes),
    /// and none for the others: what the timed result is checked from.
    initial: Vec<Option<Buf>>,
    copies: Vec<(CudaSlice<u8>, CudaSlice<u8>)>,
    bytes: u64,
    /// What the variant it was made for computes (attention's `causal`) and the scalars it
    /// takes: the call through the chooser asks and passes the same.
    axes: Vec<(String, String)>,
    scalars: Vec<String>,
    /// The reference's outputs on the first set's inputs (over the first [`SAMPLED`] elements),
    /// by reference variant: the same for every variant checked on the case (the sets hold the
    /// same inputs), so made once, not once a variant timed (each a NaN-filled output made on
    /// the host and uploaded, and the reference's run).
    references: BTreeMap<String, Vec<Output>>,
}

impl Case {
    pub fn new(gpu: &Gpu, kernel: &Kernel, shape: Shape) -> Result<Case, String> {
        let entry = &kernel.info().entry;
        let (family, variant) = (&entry.declaration, &entry.variant);
        let ops = stored(&kernel.info().entry, &shape)?;
        let bytes = family.work.bytes.eval(&|name| family.work_value(variant, name, &lookup(&shape)))?;
        let per_set: usize = ops.iter().map(|op| op.span() * op.dtype.size_bytes() as usize).sum();
        let count = rotation(gpu, per_set)?;
        let inputs = Buffers::random_inputs_repeating(&ops, &shape, REPEAT)?;
        // Every set holds the same inputs: the first made on the host, the others copied from it
        // on the GPU (made on the host, a set of 2^27 elements took seconds).
        let first = Buffers::new(gpu, ops.clone(), &inputs)?;
        let mut sets = Vec::with_capacity(count);
        for _ in 1..count {
            let bufs = first.bufs.iter().map(|b| b.copy(gpu)).collect::<Result<Vec<_>, _>>()?;
            sets.push(Buffers { ops: ops.clone(), bufs });
        }
        let initial = ops
            .iter()
            .zip(&first.bufs)
            .map(|(op, buf)| if op.decl.access == Access::ReadWrite { buf.copy(gpu).map(Some) } else { Ok(None) })
            .collect::<Result<Vec<_>, String>>()?;
        sets.insert(0, first);
        let half = (bytes / 2).max(1) as usize;
        let copies = (0..rotation(gpu, 2 * half)?)
            .map(|_| {
                let src = gpu.stream().alloc_zeros::<u8>(half).map_err(|e| format!("allocating: {e}"))?;
                let dst = gpu.stream().alloc_zeros::<u8>(half).map_err(|e| format!("allocating: {e}"))?;
                Ok((src, dst))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Case {
            shape,
            sets,
            initial,
            copies,
            bytes,
            axes: call_axes(kernel),
            scalars: taken_scalars(entry),
            references: BTreeMap::new(),
        })
    }

    /// How many sets of inputs the timed runs rotate through.
    pub fn input_sets(&self) -> usize {
        self.sets.len()
    }

    /// Median milliseconds of the kernel; its last result on the first set is then compared
    /// with the reference's on the same inputs, over the first [`SAMPLED`] elements.
    pub fn time_kernel(&mut self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<f64, String> {
        let (shape, count) = (&self.shape, self.sets.len());
        let sets = &mut self.sets;
        let ms = median_ms(gpu.stream(), WARMUP, RUNS, count, |i| sets[i % count].launch(gpu, kernel, shape).map_err(|e| e.to_string()))?;
        self.check_first(gpu, registry, kernel)?;
        Ok(ms)
    }

    /// Compares the first set's outputs, last written by `kernel`, with the reference's on
    /// copies of the same inputs made on the GPU (every set holds the same inputs). Where an
    /// operand is updated in place, the first set gets its initial contents back and `kernel`
    /// runs on it once more first.
    fn check_first(&mut self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<(), String> {
        if self.initial.iter().any(Option::is_some) {
            for (buf, initial) in self.sets[0].bufs.iter_mut().zip(&self.initial) {
                if let Some(initial) = initial {
                    *buf = initial.copy(gpu)?;
                }
            }
            self.sets[0].launch(gpu, kernel, &self.shape).map_err(|e| e.to_string())?;
        }
        self.compare_first(gpu, registry, kernel)
    }

    /// The first set's outputs as they are, checked against the reference's on the inputs as
    /// made: after exactly one launch of `kernel`'s work on them.
    fn compare_first(&mut self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<(), String> {
        let reference = reference(registry, kernel)?;
        if !self.references.contains_key(reference.name()) {
            let outputs = self.reference_outputs(gpu, reference)?;
            self.references.insert(reference.name().to_string(), outputs);
        }
        let outputs = &self.references[reference.name()];
        let family = &kernel.info().entry.declaration;
        let tolerance = tolerance(kernel, &self.shape)?;
        for (got, want) in self.sets[0].outputs_within(gpu, SAMPLED)?.into_iter().zip(outputs.iter()) {
            let error = output_error(&got, want, outputs, &family.reference.relative_to);
            if got.unwritten > 0 || error > tolerance {
                return Err(format!("the timed result is wrong: {} has {} unwritten, relative error {error:.3e}", got.name, got.unwritten));
            }
        }
        Ok(())
    }

    /// The reference's outputs on copies of the first set's inputs as made.
    fn reference_outputs(&self, gpu: &Gpu, reference: &Kernel) -> Result<Vec<Output>, String> {
        let shape = &self.shape;
        let first = &self.sets[0];
        let ops = stored(&reference.info().entry, shape)?;
        let bufs = ops
            .iter()
            .zip(first.bufs.iter().zip(&self.initial))
            .map(|(op, (buf, initial))| match (op.decl.access, initial) {
                (Access::Read, _) => buf.copy(gpu),
                (Access::ReadWrite, Some(initial)) => initial.copy(gpu),
                _ => Buf::upload(gpu, op.dtype, &vec![f64::NAN; op.span() + op.guard()]),
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut theirs = Buffers { ops, bufs };
        theirs.launch(gpu, reference, shape).map_err(|e| e.to_string())?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        theirs.outputs_within(gpu, SAMPLED)
    }

    /// Median milliseconds of the call through the family's chooser and of the copy (timed in
    /// turns, as [`Case::time_with_copy`]), its pick, and the host microseconds a cached call
    /// takes to choose, check and enqueue; the pick's result is checked against the reference's
    /// as [`Case::time_kernel`] checks a variant's.
    pub fn time_chosen(&mut self, gpu: &Gpu, registry: &Registry, chooser: &Chooser) -> Result<([f64; 2], Pick, f64), String> {
        self.chosen_in_turns(gpu, registry, chooser)
    }

    /// As [`Case::time_chosen`], the call timed alone, back to back as [`Case::time_kernel`]
    /// times a variant: the timing of a family whose baseline is a library's. In turns with a
    /// copy, a one-query decode read 65 µs, and 54-55 µs alone (H100, two sessions): the copy
    /// leaves dirty lines in the L2, which a memory-bound call writes back while it reads.
    pub fn time_chosen_alone(&mut self, gpu: &Gpu, registry: &Registry, chooser: &Chooser) -> Result<(f64, Pick, f64), String> {
        let ([ms], pick, host_us) = self.chosen_in_turns(gpu, registry, chooser)?;
        Ok((ms, pick, host_us))
    }

    /// The chosen call's median milliseconds, with the copy's in turns where N is 2, its pick,
    /// and the host microseconds of a cached call; the pick's result then checked.
    fn chosen_in_turns<const N: usize>(
        &mut self,
        gpu: &Gpu,
        registry: &Registry,
        chooser: &Chooser,
    ) -> Result<([f64; N], Pick, f64), String> {
        const HOST_CALLS: usize = 64;
        let (shape, count) = (&self.shape, self.sets.len());
        let (sets, copies) = (&mut self.sets, &mut self.copies);
        let (axes, scalars) = (&self.axes, &self.scalars);
        let pick = sets[0].launch_chosen(gpu, chooser, shape, axes, scalars).map_err(|e| e.to_string())?;
        let rotated = if N == 1 { count } else { count.max(copies.len()) };
        let ms = medians_ms(gpu.stream(), WARMUP, RUNS, rotated, |i, side| match side {
            0 => sets[i % count].launch_chosen(gpu, chooser, shape, axes, scalars).map(drop).map_err(|e| e.to_string()),
            _ => copy_once(gpu, copies, i),
        })?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        let start = std::time::Instant::now();
        for i in 0..HOST_CALLS {
            sets[i % count].launch_chosen(gpu, chooser, shape, axes, scalars).map_err(|e| e.to_string())?;
        }
        let host_us = start.elapsed().as_secs_f64() * 1e6 / HOST_CALLS as f64;
        gpu.synchronize().map_err(|e| e.to_string())?;
        // The pick's last result on the first set, checked as a timed variant's.
        self.check_first(gpu, registry, pick.kernel())?;
        Ok((ms, pick, host_us))
    }

    /// Mean microseconds of host time a copy of the call's bytes takes to enqueue (cudarc's
    /// device-to-device copy), over calls back to back: the yardstick of a dispatched call's
    /// host time beside the driver's own enqueue.
    fn copy_host_us(&mut self, gpu: &Gpu) -> Result<f64, String> {
        const HOST_CALLS: usize = 64;
        gpu.synchronize().map_err(|e| e.to_string())?;
        let start = std::time::Instant::now();
        for i in 0..HOST_CALLS {
            copy_once(gpu, &mut self.copies, i)?;
        }
        let host_us = start.elapsed().as_secs_f64() * 1e6 / HOST_CALLS as f64;
        gpu.synchronize().map_err(|e| e.to_string())?;
        Ok(host_us)
    }

    /// Median milliseconds of the call through the family's chooser and of `kernel` on the same
    /// sets, timed in turns ([`medians_ms`]), so that the two see the GPU at the same moments:
    /// what says whether the pick is as fast as the fastest variant, without the spread between
    /// cases timed apart (up to 15% on 0.05-0.1 ms calls).
    pub fn time_beside(&mut self, gpu: &Gpu, chooser: &Chooser, kernel: &Kernel) -> Result<[f64; 2], String> {
        let (shape, count, axes, scalars) = (&self.shape, self.sets.len(), &self.axes, &self.scalars);
        let sets = &mut self.sets;
        medians_ms(gpu.stream(), WARMUP, RUNS, count, |i, side| match side {
            0 => sets[i % count].launch_chosen(gpu, chooser, shape, axes, scalars).map(drop).map_err(|e| e.to_string()),
            _ => sets[i % count].launch(gpu, kernel, shape).map_err(|e| e.to_string()),
        })
    }

    /// Median milliseconds of a device-to-device copy of half the bytes the call moves (a copy
    /// reads and writes each byte).
    pub fn time_copy(&mut self, gpu: &Gpu) -> Result<f64, String> {
        let copies = &mut self.copies;
        median_ms(gpu.stream(), WARMUP, RUNS, copies.len(), |i| copy_once(gpu, copies, i))
    }

    /// Median milliseconds of the kernel and of the copy ([`Case::time_copy`]'s), timed in turns
    /// ([`medians_ms`]) so that the ratio compares the two at the same moments: a copy timed once
    /// per case before its kernels read 2,575 in one row of a bench run and 2,960 GB/s in the
    /// next, for the same bytes (H100, 2026-11-27). The kernel's result is then checked as
    /// [`Case::time_kernel`] checks it.
    pub fn time_with_copy(&mut self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<[f64; 2], String> {
        let (shape, count) = (&self.shape, self.sets.len());
        let (sets, copies) = (&mut self.sets, &mut self.copies);
        let ms = medians_ms(gpu.stream(), WARMUP, RUNS, count.max(copies.len()), |i, side| match side {
            0 => sets[i % count].launch(gpu, kernel, shape).map_err(|e| e.to_string()),
            _ => copy_once(gpu, copies, i),
        })?;
        self.check_first(gpu, registry, kernel)?;
        Ok(ms)
    }

    /// Times the kernel beside the copy and reports the two.
    pub fn record(&mut self, gpu: &Gpu, registry: &Registry, kernel: &Kernel) -> Result<Record, String> {
        let [kernel_ms, copy_ms] = self.time_with_copy(gpu, registry, kernel)?;
        Ok(self.record_timed(gpu, kernel, kernel_ms, copy_ms))
    }

    /// Times the call through the family's chooser beside the copy and reports the two, as
    /// variant `dispatch:<pick>`, with the host time of a cached call.
    pub fn record_chosen(&mut self, gpu: &Gpu, registry: &Registry, chooser: &Chooser) -> Result<Record, String> {
        let ([ms, copy_ms], pick, host_us) = self.time_chosen(gpu, registry, chooser)?;
        let mut record = self.record_timed(gpu, pick.kernel(), ms, copy_ms);
        record.variant = format!("dispatch:{}", pick.kernel().name());
        record.host_us = Some(host_us);
        record.baseline_host_us = Some(self.copy_host_us(gpu)?);
        Ok(record)
    }

    fn record_timed(&self, gpu: &Gpu, kernel: &Kernel, kernel_ms: f64, baseline_ms: f64) -> Record {
        let giga = |ms: f64| self.bytes as f64 / (ms * 1e-3) / 1e9;
        let family = &kernel.info().entry.declaration;
        let shape = family.quantities.iter().map(|q| self.shape[q] as usize).collect();
        Record::new(kernel, gpu, shape, "GB/s", kernel_ms, giga(kernel_ms), "device copy", baseline_ms, giga(baseline_ms), self.sets.len())
    }
}

/// Copy `i` of a case's rotated (source, destination) pairs.
fn copy_once(gpu: &Gpu, copies: &mut [(CudaSlice<u8>, CudaSlice<u8>)], i: usize) -> Result<(), String> {
    let count = copies.len();
    let (src, dst) = &mut copies[i % count];
    gpu.stream().memcpy_dtod(src, dst).map_err(|err| format!("device-to-device copy: {err}"))
}

/// Tuning on first call, for `family`: a chooser of its own (its own picks) with tuning on and
/// its timings kept in a folder of its own; one call of the family's perf shape, whose result
/// is checked against the reference on the inputs as made (operands updated in place must come
/// back from the timings as they were); a second call takes the kept pick, and a second
/// chooser the pick read back from the file.
pub fn first_call(gpu: &Gpu, registry: &Registry, family: &str) -> Result<String, String> {
    let tables: Vec<_> = registry.families().flat_map(|c| c.tables().iter().cloned()).collect();
    let folder = tempfile::tempdir().map_err(|err| format!("a folder for the timings: {err}"))?;
    let fresh = || -> Result<Registry, String> {
        let registry = registry.clone().with_family_tables(tables.clone())?;
        let chooser = registry.family(family).map_err(|e| e.to_string())?;
        chooser.tune_first_calls(true);
        chooser.keep_first_calls_in(folder.path());
        Ok(registry)
    };
    let (one, two) = (fresh()?, fresh()?);
    let chooser = one.family(family).map_err(|e| e.to_string())?;
    let capability = gpu.capability();
    let runs = |k: &&Kernel| tilesmith_runtime::runs_on(&k.info().entry.targets, capability) && perf_shape(k).is_ok();
    let of = |dtype: Dtype| chooser.kernels().iter().filter(runs).find(|k| k.variant().dtype == dtype);
    let kernel = of(Dtype::Bf16).or_else(|| chooser.kernels().iter().find(runs)).ok_or("no variant of it runs here")?;
    let mut case = Case::new(gpu, kernel, perf_shape(kernel)?)?;
    let (shape, axes, scalars) = (case.shape.clone(), case.axes.clone(), case.scalars.clone());
    let pick = case.sets[0].launch_chosen(gpu, chooser, &shape, &axes, &scalars).map_err(|e| e.to_string())?;
    gpu.synchronize().map_err(|e| e.to_string())?;
    case.compare_first(gpu, registry, pick.kernel())?;
    if pick.takers.len() > 1 && !pick.reason.starts_with("timed on first call") {
        return Err(format!("{} variants take {}, and the pick was not timed: {}", pick.takers.len(), describe(&shape), pick.reason));
    }
    let second = 1 % case.sets.len();
    let again = case.sets[second].launch_chosen(gpu, chooser, &shape, &axes, &scalars).map_err(|e| e.to_string())?;
    let read = case.sets[0].bound(two.family(family).map_err(|e| e.to_string())?.call(gpu), chooser.declaration(), &shape, &scalars);
    let read = axes.iter().fold(read, |call, (axis, value)| call.axis(axis, value)).choose().map_err(|e| e.to_string())?;
    if pick.takers.len() > 1 {
        if again.kernel().name() != pick.kernel().name() || again.reason != pick.reason {
            return Err(format!("a second call ran {} ({}), the first {}", again.kernel().name(), again.reason, pick.kernel().name()));
        }
        if read.kernel().name() != pick.kernel().name() || !read.reason.starts_with("timed on an earlier first call") {
            return Err(format!(
                "a second chooser picked {} ({}), the first timed {}",
                read.kernel().name(),
                read.reason,
                pick.kernel().name()
            ));
        }
    }
    Ok(format!("{family} {}: {}; {}", describe(&shape), pick.kernel().name(), pick.reason))
}

/// Whether `kernel` takes `shape` (its multiples, sizes and limits) on a GPU of `sms`
/// multiprocessors whose blocks may use `smem_per_block` bytes of shared memory, planned on
/// buffers that hold exactly what the operands span: no GPU needed.
pub fn takes(kernel: &Kernel, shape: &Shape, sms: u32, smem_per_block: u32) -> Result<(), String> {
    let entry = &kernel.info().entry;
    match plan_call(kernel.info(), &unallocated_call(entry, shape)?, sms)? {
        Some(launch) => check_block_smem(kernel.info(), u64::from(launch.dynamic_smem_bytes), smem_per_block, "the GPU"),
        None => Ok(()),
    }
}

/// A call of `shape` on buffers that hold exactly what the operands of `entry`'s variant span,
/// apart and unallocated, with the family's trial scalars: for planning and choosing without a
/// GPU.
pub fn unallocated_call(entry: &Entry, shape: &Shape) -> Result<Call, String> {
    let family = &entry.declaration;
    let mut call = Call::default();
    for (index, op) in stored(entry, shape)?.into_iter().enumerate() {
        call = call.operand(&op.decl.name, op.dtype, Buffer { len: op.span(), addr: (index as u64 + 1) << 48 });
    }
    for (q, v) in shape {
        call = call.quantity(q, *v);
    }
    for scalar in family.scalars.iter().filter(|s| entry.launch.takes_scalar(&s.name)) {
        call = call.scalar(&scalar.name, scalar.trial_value());
    }
    Ok(call)
}

/// The declared perf shape, with packed leading dimensions; for a variant whose rules it breaks
/// (attention's head_dim 64 beside a perf shape of 128), the first bench shape within them.
pub fn perf_shape(kernel: &Kernel) -> Result<Shape, String> {
    let entry = &kernel.info().entry;
    let family = &entry.declaration;
    if family.trials.perf.is_empty() {
        return Err(format!("family {} declares no trials.perf shape", kernel.variant().family));
    }
    let keeps = |shape: &Shape| keeps_rules(entry, shape);
    let mut declared = std::iter::once(&family.trials.perf).chain(&family.trials.bench).map(|s| shape_of(family, s));
    let shape = declared
        .find(keeps)
        .ok_or(format!("{}: neither trials.perf nor any trials.bench shape keeps its rules; declare one that does", kernel.name()))?;
    with_lds(kernel, shape, 0)
}

#[cfg(test)]
mod tests {
    use super::first_per_call;

    #[test]
    fn first_per_call_keeps_the_first_item_of_each_call_in_order() {
        let causal = |value: &str| vec![("causal".to_string(), value.to_string())];
        let items = [("a", "none"), ("b", "causal"), ("c", "none"), ("d", "causal")];
        assert_eq!(first_per_call(items, |(_, call)| causal(call)), [("a", "none"), ("b", "causal")]);
    }
}
