//! The checks that stand between a call and a launch, as pure functions of the manifest data,
//! the shape and the buffers, so that they are tested without a GPU.

use tilesmith_spec::arch::compute_capability;
use tilesmith_spec::{Built, Dtype, GridRule, Kind, Layout, Operand, ParamKind, Quantity, Targets};

/// A device buffer as the checks see it: its length in elements and its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub len: usize,
    pub addr: u64,
}

/// C (M×N, row-major) = A (M×K) · B (K×N), stored as `layout` says, with leading dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub layout: Layout,
}

impl GemmShape {
    /// Leading dimensions equal to the stored rows' lengths: no padding.
    pub fn packed(m: usize, n: usize, k: usize, layout: Layout) -> GemmShape {
        let lda = if layout.a_row_major() { k } else { m };
        let ldb = if layout.b_row_major() { n } else { k };
        GemmShape { m, n, k, lda, ldb, ldc: n, layout }
    }

    /// (rows, row length) of A, B and C as stored.
    pub fn stored(&self) -> [(usize, usize); 3] {
        let a = if self.layout.a_row_major() { (self.m, self.k) } else { (self.k, self.m) };
        let b = if self.layout.b_row_major() { (self.k, self.n) } else { (self.n, self.k) };
        [a, b, (self.m, self.n)]
    }

    /// Elements each of A, B and C spans.
    pub fn spans(&self) -> [usize; 3] {
        let lds = [self.lda, self.ldb, self.ldc];
        let stored = self.stored();
        [0, 1, 2].map(|i| span(stored[i].0, stored[i].1, lds[i]).unwrap_or(usize::MAX))
    }
}

/// Y (N×M) = Xᵀ, X (M×N); both row-major with leading dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransposeShape {
    pub m: usize,
    pub n: usize,
    pub ldx: usize,
    pub ldy: usize,
}

impl TransposeShape {
    pub fn packed(m: usize, n: usize) -> TransposeShape {
        TransposeShape { m, n, ldx: n, ldy: m }
    }

    /// Elements each of X and Y spans.
    pub fn spans(&self) -> [usize; 2] {
        [span(self.m, self.n, self.ldx), span(self.n, self.m, self.ldy)].map(|s| s.unwrap_or(usize::MAX))
    }
}

/// A launch the checks allowed, with its arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

/// A kernel argument, as the kernel's parameter takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    Pointer(u64),
    I32(i32),
    /// Encoded into a `CUtensorMap` just before the launch, which needs the driver.
    TensorMap(TensorMapArg),
}

/// A 2D tensor map of an operand as stored, checked against TMA's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapArg {
    pub addr: u64,
    pub dtype: Dtype,
    /// [row length, rows], in elements.
    pub dims: [u64; 2],
    pub row_stride_bytes: u64,
    /// [elements along a row, rows] copied at a time.
    pub box_: [u32; 2],
    pub swizzle_bytes: u32,
}

/// One operand of a call as its kernel parameters may take it.
struct OperandArg {
    operand: Operand,
    addr: u64,
    rows: usize,
    cols: usize,
    ld: usize,
}

/// Elements a matrix of `rows` rows of `cols` with leading dimension `ld` spans.
fn span(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(ld)?.checked_add(cols)
}

fn order(row_major: bool) -> &'static str {
    if row_major {
        "row-major"
    } else {
        "column-major"
    }
}

/// One operand as the checks see it.
struct Stored<'a> {
    name: &'a str,
    ld_name: &'a str,
    buffer: Buffer,
    rows: usize,
    cols: usize,
    ld: usize,
    layout: &'a str,
}

/// The rules every call meets, whatever the kernel: rows no longer than their leading
/// dimension, and a buffer that holds what the matrix spans.
fn check_stored(op: &Stored<'_>) -> Result<(), String> {
    let Stored { name, ld_name, buffer, rows, cols, ld, layout } = *op;
    // An empty matrix is never read or written, whatever its leading dimension.
    if rows > 0 && cols > 0 && ld < cols {
        return Err(format!("{ld_name} = {ld} is less than {}, the length of a stored row of {name} ({layout})", cols.max(1)));
    }
    let needed = span(rows, cols, ld).ok_or(format!("{name} spans more elements than an address can hold"))?;
    if buffer.len < needed {
        return Err(format!("{name} holds {} elements, but {rows} rows of {cols} with {ld_name} = {ld} span {needed}", buffer.len));
    }
    Ok(())
}

fn check_operand(built: &Built, dtype: Dtype, op: &Stored<'_>) -> Result<(), String> {
    check_stored(op)?;
    let Stored { name, ld_name, buffer, ld, .. } = *op;
    let requires = &built.entry.requires;
    if ld.checked_rem(requires.ld_multiple as usize) != Some(0) {
        return Err(format!(
            "{ld_name} = {ld} is not a multiple of {} elements, as this {} variant assumes (16-byte rows)",
            requires.ld_multiple, built.entry.variant.bounds
        ));
    }
    let align = u64::from(requires.ptr_align_bytes.max(dtype.size_bytes()));
    if buffer.addr % align != 0 {
        return Err(format!("{name} starts at {:#x}, which is not {align}-byte aligned", buffer.addr));
    }
    Ok(())
}

fn check_dims(dims: &[(&str, usize, u32)], bounds: &str) -> Result<(), String> {
    for &(dim, value, multiple) in dims {
        if value.checked_rem(multiple as usize) != Some(0) {
            return Err(format!(
                "{dim} = {value} is not a multiple of {multiple}: {bounds} variants take tile multiples only; use a checked variant"
            ));
        }
    }
    Ok(())
}

fn check_kernel(built: &Built, dtype: Dtype, family: &str) -> Result<(), String> {
    let variant = &built.entry.variant;
    if variant.family().as_str() != family {
        return Err(format!("it is a {} kernel, not a {family} kernel", variant.family()));
    }
    if variant.dtype != dtype {
        return Err(format!("it takes {} elements, but the buffers hold {dtype}", variant.dtype));
    }
    Ok(())
}

/// The kernel's arguments, made by walking its parameter list: each pointer parameter gets its
/// operand's address, each tensor map its operand's layout, each integer its quantity,
/// refused when it does not fit the parameter.
fn arguments(built: &Built, dtype: Dtype, operands: &[OperandArg], quantities: &[(Quantity, usize)]) -> Result<Vec<Arg>, String> {
    let find = |name: &str, operand: Operand| {
        operands
            .iter()
            .find(|o| o.operand == operand)
            .ok_or(format!("its parameter `{name}` wants operand {}, which this call does not pass", operand.as_str()))
    };
    built
        .entry
        .launch
        .params
        .iter()
        .map(|param| match param.kind {
            ParamKind::Pointer { operand, .. } => find(&param.name, operand).map(|o| Arg::Pointer(o.addr)),
            ParamKind::TensorMap { operand, box_, swizzle } => {
                tensor_map(find(&param.name, operand)?, dtype, box_, swizzle).map(Arg::TensorMap)
            }
            ParamKind::I32 { value } => {
                let &(_, given) = quantities.iter().find(|(q, _)| *q == value).ok_or(format!(
                    "its parameter `{}` wants {}, which this call does not give",
                    param.name,
                    value.as_str()
                ))?;
                i32::try_from(given).map(Arg::I32).map_err(|_| {
                    format!(
                        "{} = {given} does not fit the kernel's 32-bit parameter `{}` (at most {})",
                        value.as_str(),
                        param.name,
                        i32::MAX
                    )
                })
            }
        })
        .collect()
}

/// TMA's rules for a 2D tensor: a 16-byte-aligned start, rows a multiple of 16 bytes apart and
/// less than 2^40 bytes, at most 2^32 elements along each side.
fn tensor_map(o: &OperandArg, dtype: Dtype, box_: [u32; 2], swizzle_bytes: u32) -> Result<TensorMapArg, String> {
    let name = o.operand.as_str();
    if !o.addr.is_multiple_of(16) {
        return Err(format!("{name} starts at {:#x}; TMA needs 16-byte-aligned operands", o.addr));
    }
    let row_stride_bytes = (o.ld as u64).saturating_mul(u64::from(dtype.size_bytes()));
    if row_stride_bytes % 16 != 0 || row_stride_bytes >= 1 << 40 {
        return Err(format!("the rows of {name} are {row_stride_bytes} bytes apart; TMA needs a multiple of 16 below 2^40"));
    }
    let dims = [o.cols as u64, o.rows as u64];
    if dims.iter().any(|&d| d > u64::from(u32::MAX)) {
        return Err(format!("{name} is {} x {} as stored; TMA takes at most 2^32 - 1 elements a side", o.rows, o.cols));
    }
    // An empty side is never read (the kernel issues no loads then), but TMA wants at least 1.
    Ok(TensorMapArg { addr: o.addr, dtype, dims: dims.map(|d| d.max(1)), row_stride_bytes: row_stride_bytes.max(16), box_, swizzle_bytes })
}

fn launch(built: &Built, m: usize, n: usize, sms: u32, args: Vec<Arg>) -> Result<Launch, String> {
    let spec = &built.entry.launch;
    let grid = spec
        .grid
        .grid(m as u64, n as u64, sms, spec.cluster)
        .ok_or(format!("a {m}×{n} problem needs more blocks than a CUDA grid holds"))?;
    let persistent = matches!(spec.grid, GridRule::Persistent { .. });
    Ok(Launch { grid, block: spec.block, cluster: spec.cluster, persistent, dynamic_smem_bytes: spec.dynamic_smem_bytes, args })
}

/// A, B and C of a GEMM call as the checks see them.
fn gemm_operands<'a>(shape: &GemmShape, [a, b, c]: [Buffer; 3], layouts: &'a [String; 2]) -> [Stored<'a>; 3] {
    let [sa, sb, sc] = shape.stored();
    [
        Stored { name: "A", ld_name: "lda", buffer: a, rows: sa.0, cols: sa.1, ld: shape.lda, layout: &layouts[0] },
        Stored { name: "B", ld_name: "ldb", buffer: b, rows: sb.0, cols: sb.1, ld: shape.ldb, layout: &layouts[1] },
        Stored { name: "C", ld_name: "ldc", buffer: c, rows: sc.0, cols: sc.1, ld: shape.ldc, layout: "row-major" },
    ]
}

fn operand_layouts(layout: Layout) -> [String; 2] {
    let letters = layout.as_str();
    [format!("{}, layout {letters}", order(layout.a_row_major())), format!("{}, layout {letters}", order(layout.b_row_major()))]
}

/// Checks what any GEMM call must meet before anything reads its buffers: leading dimensions
/// at least the stored rows' lengths, and buffers that hold what A, B and C span.
pub fn check_gemm_call(shape: &GemmShape, buffers: [Buffer; 3]) -> Result<(), String> {
    let layouts = operand_layouts(shape.layout);
    gemm_operands(shape, buffers, &layouts).iter().try_for_each(check_stored)
}

/// Checks a GEMM call for a GPU with `sms` multiprocessors; `None` when there is nothing to
/// compute (M or N is 0); K = 0 with M and N above 0 is refused.
pub fn plan_gemm(built: &Built, dtype: Dtype, shape: &GemmShape, [a, b, c]: [Buffer; 3], sms: u32) -> Result<Option<Launch>, String> {
    check_kernel(built, dtype, "gemm")?;
    let Kind::Gemm { layout, .. } = built.entry.variant.kind else { unreachable!("checked family") };
    if shape.layout != layout {
        return Err(format!("it computes layout {layout}, but the call is for layout {}", shape.layout));
    }
    let multiple = built.entry.requires.shape_multiple;
    let bounds = built.entry.variant.bounds.as_str();
    check_dims(&[("M", shape.m, multiple[0]), ("N", shape.n, multiple[1]), ("K", shape.k, multiple[2])], bounds)?;
    let [sa, sb, sc] = shape.stored();
    let layouts = operand_layouts(layout);
    for operand in &gemm_operands(shape, [a, b, c], &layouts) {
        check_operand(built, dtype, operand)?;
    }
    let s = shape;
    let stored = [(Operand::A, a, sa, s.lda), (Operand::B, b, sb, s.ldb), (Operand::C, c, sc, s.ldc)]
        .map(|(operand, buffer, (rows, cols), ld)| OperandArg { operand, addr: buffer.addr, rows, cols, ld });
    let args = arguments(
        built,
        dtype,
        &stored,
        &[
            (Quantity::M, s.m),
            (Quantity::N, s.n),
            (Quantity::K, s.k),
            (Quantity::Lda, s.lda),
            (Quantity::Ldb, s.ldb),
            (Quantity::Ldc, s.ldc),
        ],
    )?;
    if shape.m == 0 || shape.n == 0 {
        return Ok(None);
    }
    if shape.k == 0 {
        return Err(format!(
            "K = 0 makes C = A·B all zeros ({}x{}), which no GEMM kernel computes: fill C with zeros instead",
            shape.m, shape.n
        ));
    }
    launch(built, shape.m, shape.n, sms, args).map(Some)
}

/// Checks a transpose call for a GPU with `sms` multiprocessors; `None` when there is nothing
/// to move.
pub fn plan_transpose(
    built: &Built,
    dtype: Dtype,
    shape: &TransposeShape,
    [x, y]: [Buffer; 2],
    sms: u32,
) -> Result<Option<Launch>, String> {
    check_kernel(built, dtype, "transpose")?;
    let multiple = built.entry.requires.shape_multiple;
    let bounds = built.entry.variant.bounds.as_str();
    check_dims(&[("M", shape.m, multiple[0]), ("N", shape.n, multiple[1])], bounds)?;
    let operands = [
        Stored { name: "X", ld_name: "ldx", buffer: x, rows: shape.m, cols: shape.n, ld: shape.ldx, layout: "row-major" },
        Stored { name: "Y", ld_name: "ldy", buffer: y, rows: shape.n, cols: shape.m, ld: shape.ldy, layout: "row-major" },
    ];
    for operand in &operands {
        check_operand(built, dtype, operand)?;
    }
    let s = shape;
    let stored = [
        OperandArg { operand: Operand::X, addr: x.addr, rows: s.m, cols: s.n, ld: s.ldx },
        OperandArg { operand: Operand::Y, addr: y.addr, rows: s.n, cols: s.m, ld: s.ldy },
    ];
    let args = arguments(built, dtype, &stored, &[(Quantity::M, s.m), (Quantity::N, s.n), (Quantity::Ldx, s.ldx), (Quantity::Ldy, s.ldy)])?;
    if shape.m == 0 || shape.n == 0 {
        return Ok(None);
    }
    launch(built, shape.m, shape.n, sms, args).map(Some)
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
