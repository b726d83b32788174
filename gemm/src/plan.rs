//! GEMM and transpose calls as calls by name: each checks what its family's typed arguments
//! must meet, binds them by the family's declared names and leaves every other check to the
//! runtime's `plan_call`.

use crate::shape::{Activation, Batch, EpilogueArgs, GemmShape, TransposeShape};
use tilesmith_runtime::{check_stored, plan_call, Buffer, Call, Launch, Stored};
use tilesmith_spec::{Built, Dtype, Layout};

fn order(row_major: bool) -> &'static str {
    if row_major {
        "row-major"
    } else {
        "column-major"
    }
}

fn check_family(built: &Built, dtype: Dtype, family: &str) -> Result<(), String> {
    let variant = &built.entry.variant;
    if variant.family != family {
        return Err(format!("it is a kernel of family `{}`, not of family `{family}`", variant.family));
    }
    if variant.dtype != dtype {
        return Err(format!("it takes {} elements, but the buffers hold {dtype}", variant.dtype));
    }
    Ok(())
}

/// Checks what any GEMM call must meet before anything reads its buffers: leading dimensions
/// at least the stored rows' lengths, and buffers that hold what A, B and C span (every
/// problem's).
pub fn check_gemm_call(shape: &GemmShape, buffers: [Buffer; 3]) -> Result<(), String> {
    let letters = shape.layout.as_str();
    let stored = shape.stored();
    let lds = [shape.lda, shape.ldb, shape.ldc];
    let layouts = [
        format!("{}, layout {letters}", order(shape.layout.a_row_major())),
        format!("{}, layout {letters}", order(shape.layout.b_row_major())),
        "row-major".to_string(),
    ];
    (0..3).try_for_each(|i| {
        check_stored(&Stored {
            name: ["a", "b", "c"][i].into(),
            ld_name: ["lda", "ldb", "ldc"][i].into(),
            buffer: buffers[i],
            rows: stored[i].0,
            cols: stored[i].1,
            ld: lds[i],
            outer: Vec::new(),
            layout: layouts[i].clone(),
            dtype: Dtype::F32,
            problems: shape.batch.count,
            stride: shape.batch.strides[i],
        })
    })
}

/// The GEMM wrapper over [`plan_call`] for C = A·B, for a GPU with `sms` multiprocessors;
/// `None` when there is nothing to compute (M or N is 0); K = 0 with M and N above 0 is refused.
pub fn plan_gemm(built: &Built, dtype: Dtype, shape: &GemmShape, buffers: [Buffer; 3], sms: u32) -> Result<Option<Launch>, String> {
    plan_gemm_with(built, dtype, shape, buffers, &EpilogueArgs::default(), sms)
}

/// As [`plan_gemm`], with an epilogue: the variant must apply the call's activation (its
/// `epilogue` axis), and take α, β and the biases the call gives.
pub fn plan_gemm_with(
    built: &Built,
    dtype: Dtype,
    shape: &GemmShape,
    buffers: [Buffer; 3],
    epilogue: &EpilogueArgs,
    sms: u32,
) -> Result<Option<Launch>, String> {
    let call = gemm_call(built, dtype, shape, buffers, epilogue)?;
    let launch = plan_call(built, &call, sms)?;
    refuse_empty_k(shape, launch.is_some())?;
    Ok(launch)
}

/// The GEMM call bound by the family's names, after the checks a call by name does not make:
/// the variant's layout and epilogue.
pub(crate) fn gemm_call(
    built: &Built,
    dtype: Dtype,
    shape: &GemmShape,
    [a, b, c]: [Buffer; 3],
    epilogue: &EpilogueArgs,
) -> Result<Call, String> {
    check_family(built, dtype, "gemm")?;
    let variant = &built.entry.variant;
    let layout = variant.word("layout").unwrap_or_default();
    if shape.layout.as_str() != layout {
        return Err(format!("it computes layout {layout}, but the call is for layout {}", shape.layout));
    }
    let applied = Activation::epilogue_of(variant);
    if !epilogue.activation.applied_by(applied) {
        let asked = match epilogue.activation {
            Activation::NONE => "none or linear".to_string(),
            asked => asked.to_string(),
        };
        return Err(format!("it applies epilogue {applied}, but the call asks for activation {} (epilogue {asked})", epilogue.activation));
    }
    Ok(bound(dtype, shape, [a, b, c], epilogue))
}

/// A GEMM call's arguments bound by the family's names.
fn bound(dtype: Dtype, shape: &GemmShape, [a, b, c]: [Buffer; 3], epilogue: &EpilogueArgs) -> Call {
    let out = epilogue.out.unwrap_or(dtype);
    let mut call = Call::default().operand("a", dtype, a).operand("b", epilogue.b.unwrap_or(dtype), b).operand("c", out, c);
    for (name, buffer) in [("bias", epilogue.bias), ("row_bias", epilogue.row_bias)] {
        if let Some(buffer) = buffer {
            call = call.operand(name, out, buffer);
        }
    }
    let values = values(shape, epilogue.alpha, epilogue.beta, epilogue.scales);
    Call { quantities: values.quantities, scalars: values.scalars, ..call }
}

/// A GEMM call's quantities and scalars by the family's names: only what differs from the
/// declaration's defaults, so that plain calls fit GEMM families without the epilogue's names.
fn values(s: &GemmShape, alpha: f32, beta: f32, scales: [f32; 2]) -> Call {
    let mut call = Call::default()
        .quantity("m", s.m as u64)
        .quantity("n", s.n as u64)
        .quantity("k", s.k as u64)
        .quantity("lda", s.lda as u64)
        .quantity("ldb", s.ldb as u64)
        .quantity("ldc", s.ldc as u64);
    if s.is_batched() {
        call = call.quantity("batch", s.batch.count as u64);
        for (name, stride) in ["stride_a", "stride_b", "stride_c"].into_iter().zip(s.batch.strides) {
            call = call.quantity(name, stride as u64);
        }
    }
    for (name, value, default) in [("alpha", alpha, 1.0), ("beta", beta, 0.0), ("scale_a", scales[0], 1.0), ("scale_b", scales[1], 1.0)] {
        if value != default {
            call = call.scalar(name, f64::from(value));
        }
    }
    call
}

/// The values (quantities, scalars, axes) of the call of family `gemm` by name for a shape and
/// epilogue: the layout and the activation are the axes it asks for.
pub(crate) fn family_values(shape: &GemmShape, activation: Activation, alpha: f32, beta: f32, scales: [f32; 2]) -> Call {
    asking(values(shape, alpha, beta, scales), shape, activation)
}

/// `call` asking for the layout and the activation, as a call of family `gemm` by name does.
fn asking(call: Call, shape: &GemmShape, activation: Activation) -> Call {
    call.axis("layout", shape.layout.as_str()).axis("epilogue", activation.as_str())
}

/// The call of family `gemm` that `registry.family("gemm")` takes for these arguments: bound
/// by name, with the layout and the activation as the axes the call asks for.
pub fn family_call(dtype: Dtype, shape: &GemmShape, buffers: [Buffer; 3], epilogue: &EpilogueArgs) -> Call {
    asking(bound(dtype, shape, buffers, epilogue), shape, epilogue.activation)
}

/// A call of family `gemm` by name as GEMM's typed arguments: its dtype (A's), shape, buffers
/// and epilogue; the inverse of [`family_call`]. Names and values are those the family's
/// declaration binds (the chooser checks them first); the layout is the one rule it adds.
pub fn typed_call(call: &Call) -> Result<(Dtype, GemmShape, [Buffer; 3], EpilogueArgs), String> {
    let operand = |name: &str| call.operands.iter().find(|(n, ..)| n == name).map(|(_, dtype, buffer)| (*dtype, *buffer));
    let needed = |name: &str| operand(name).ok_or_else(|| format!("a GEMM call passes operand `{name}`"));
    let ((dtype, a), (b_dtype, b), (out, c)) = (needed("a")?, needed("b")?, needed("c")?);
    let quantity = |name: &str, default: u64| {
        let value = call.quantities.iter().find(|(n, _)| n == name).map_or(default, |(_, v)| *v);
        usize::try_from(value).map_err(|_| format!("{name} = {value} does not fit an address on this host"))
    };
    let axis = |name: &str| call.axes.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let layout = axis("layout").ok_or("a GEMM call names the layout it is stored in: .axis(\"layout\", \"tn\") (nn, nt, tn or tt)")?;
    let layout = Layout::parse(layout).ok_or_else(|| format!("layout `{layout}` is none of nn, nt, tn, tt"))?;
    let activation = axis("epilogue").map(Activation::named).transpose()?.unwrap_or(Activation::NONE);
    let scalar = |name: &str, default: f32| call.scalars.iter().find(|(n, _)| n == name).map_or(default, |(_, v)| *v as f32);
    let batch =
        Batch { count: quantity("batch", 1)?, strides: [quantity("stride_a", 0)?, quantity("stride_b", 0)?, quantity("stride_c", 0)?] };
    let shape = GemmShape {
        m: quantity("m", 0)?,
        n: quantity("n", 0)?,
        k: quantity("k", 0)?,
        lda: quantity("lda", 0)?,
        ldb: quantity("ldb", 0)?,
        ldc: quantity("ldc", 0)?,
        layout,
        batch,
    };
    // The biases are read as C's type, whatever a call by name says they hold.
    let bias = |name: &str| match operand(name) {
        Some((held, _)) if held != out => Err(format!("`{name}` holds {held}, and C holds {out}: a GEMM's biases are of C's type")),
        found => Ok(found.map(|(_, buffer)| buffer)),
    };
    let epilogue = EpilogueArgs {
        activation,
        alpha: scalar("alpha", 1.0),
        beta: scalar("beta", 0.0),
        bias: bias("bias")?,
        row_bias: bias("row_bias")?,
        out: (out != dtype).then_some(out),
        b: (b_dtype != dtype).then_some(b_dtype),
        scales: [scalar("scale_a", 1.0), scalar("scale_b", 1.0)],
    };
    Ok((dtype, shape, [a, b, c], epilogue))
}

/// K = 0 with M and N above 0 (a launch planned) is refused: C would be all zeros.
pub(crate) fn refuse_empty_k(shape: &GemmShape, planned: bool) -> Result<(), String> {
    if planned && shape.k == 0 {
        return Err(format!(
            "K = 0 makes C = A·B all zeros ({}x{}), which no GEMM kernel computes: fill C with zeros instead",
            shape.m, shape.n
        ));
    }
    Ok(())
}

/// The transpose wrapper over [`plan_call`]; `None` when there is nothing to move.
pub fn plan_transpose(
    built: &Built,
    dtype: Dtype,
    shape: &TransposeShape,
    buffers: [Buffer; 2],
    sms: u32,
) -> Result<Option<Launch>, String> {
    plan_call(built, &transpose_call(built, dtype, shape, buffers)?, sms)
}

/// The transpose call bound by the family's names.
pub(crate) fn transpose_call(built: &Built, dtype: Dtype, shape: &TransposeShape, [x, y]: [Buffer; 2]) -> Result<Call, String> {
    check_family(built, dtype, "transpose")?;
    let s = shape;
    Ok(Call::default()
        .operand("x", dtype, x)
        .operand("y", dtype, y)
        .quantity("m", s.m as u64)
        .quantity("n", s.n as u64)
        .quantity("ldx", s.ldx as u64)
        .quantity("ldy", s.ldy as u64))
}
