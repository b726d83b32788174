//! Expands a declared variant through its Tera template into CUDA source and launch data.

use crate::guard;
use crate::project::{sha256_hex, Project};
use anyhow::{bail, Context as _, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tera::{Context, Tera};
use tilesmith_spec::config::plain_words;
use tilesmith_spec::launch::{Access, GridRule, LaunchSpec, Param, ParamKind};
use tilesmith_spec::{Declared, Diagnostic, Entry, Expr, Family, Requirements, Rule, Targets, Variant};

/// A variant's rendered source and manifest entry.
pub struct Rendered {
    pub entry: Entry,
    pub source: String,
}

/// The partials every project's templates may import, built into the tool: the contract
/// macros, element helpers, the source header, PTX wrappers and the row-wise helpers. A
/// project's own `kernel-templates/partials/<name>` takes precedence.
const BUILTIN_PARTIALS: &[(&str, &str)] = &[
    ("partials/contract.cu.tera", include_str!("../../kernel-templates/partials/contract.cu.tera")),
    ("partials/elements.cu.tera", include_str!("../../kernel-templates/partials/elements.cu.tera")),
    ("partials/epilogue.cu.tera", include_str!("../../kernel-templates/partials/epilogue.cu.tera")),
    ("partials/header.cu.tera", include_str!("../../kernel-templates/partials/header.cu.tera")),
    ("partials/hopper.cu.tera", include_str!("../../kernel-templates/partials/hopper.cu.tera")),
    ("partials/ptx.cu.tera", include_str!("../../kernel-templates/partials/ptx.cu.tera")),
    ("partials/reference.cu.tera", include_str!("../../kernel-templates/partials/reference.cu.tera")),
    ("partials/rowwise.cu.tera", include_str!("../../kernel-templates/partials/rowwise.cu.tera")),
    ("partials/rowwise_params.cu.tera", include_str!("../../kernel-templates/partials/rowwise_params.cu.tera")),
];

/// The templates of a project, parsed once.
pub struct Renderer {
    /// Shared with the thread each render runs on ([`guard::with_deadline`]).
    tera: Arc<Tera>,
    /// Each template's text by its name, to point compiler errors back at template lines.
    pub texts: BTreeMap<String, String>,
    /// The names of the built-in partials in use (the project has no file of that name).
    builtin: BTreeSet<String>,
    /// Why rendering stopped, once a render ran past its time or memory: that render still runs
    /// on its thread (until the process ends), so no other is started beside it.
    stopped: std::sync::Mutex<Option<String>>,
}

impl Renderer {
    pub fn load(project: &Project) -> Result<Renderer> {
        let dir = project.templates_dir();
        let mut texts = BTreeMap::new();
        collect_templates(&dir, &mut texts)?;
        let mut builtin = BTreeSet::new();
        for (name, text) in BUILTIN_PARTIALS {
            if !texts.contains_key(*name) {
                texts.insert(name.to_string(), text.to_string());
                builtin.insert(name.to_string());
            }
        }
        for (name, text) in &texts {
            guard::check_nesting(text).map_err(|rule| anyhow::anyhow!("kernel-templates/{name}: {rule}"))?;
        }
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        tera.register_function("range", guard::range);
        // All at once: templates import partials, which must be known when they are parsed.
        tera.add_raw_templates(texts.iter().map(|(name, text)| (name.as_str(), text.as_str())))
            .map_err(|err| anyhow::anyhow!("in {}: {}", project.relative(&dir), messages(&err).join(": ")))?;
        guard::check_recursion(&tera).map_err(|rule| anyhow::anyhow!("in {}: {rule}", project.relative(&dir)))?;
        Ok(Renderer { tera: Arc::new(tera), texts, builtin, stopped: std::sync::Mutex::default() })
    }

    /// A render error's innermost message; for a name not found, with the line of the template
    /// that first uses it and the nearest name the template could have meant.
    fn explain(&self, template: &str, err: &tera::Error, ctx: &Context) -> String {
        let message = messages(err).pop().unwrap_or_default();
        let Some(name) = message.strip_prefix("Variable `").and_then(|rest| rest.split('`').next()) else {
            return message;
        };
        let root = name.split(['.', '[']).next().unwrap_or(name);
        let text = self.texts.get(template).map_or("", String::as_str);
        let used = |line: &str| {
            line.match_indices(root).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + root.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            })
        };
        let mut message = message.clone();
        if let Some(line) = text.lines().position(used) {
            message.push_str(&format!(" (first used at line {})", line + 1));
        }
        let known = ctx.clone().into_json();
        let nearest = known.as_object().into_iter().flat_map(|map| map.keys()).min_by_key(|key| strsim::levenshtein(key, root));
        if let Some(nearest) = nearest.filter(|key| strsim::levenshtein(key, root) <= 2) {
            message.push_str(&format!("; did you mean `{nearest}`?"));
        }
        message
    }

    /// Where a template's text comes from, for messages: its file, or the tool.
    pub fn origin(&self, name: &str) -> String {
        if self.builtin.contains(name) {
            format!("{name} (built into tilesmith)")
        } else {
            format!("kernel-templates/{name}")
        }
    }

    /// Renders one variant, or says which rule it breaks, located at its line of `variants.toml`.
    /// The template is rendered twice: with `emit = "launch"` it writes its launch contract as
    /// TOML, which is read and checked here; with `emit = "source"` it writes the CUDA source,
    /// whose kernel signature comes from that contract's parameter list.
    pub fn render(&self, project: &Project, declared: &Declared) -> Result<Rendered, Diagnostic> {
        let variant = &declared.variant;
        let template = &declared.backend.template;
        let fail =
            |rule: String| Diagnostic { file: declared_file(project), line: declared.line, variant: Some(variant.name.clone()), rule };
        if !self.texts.contains_key(template) {
            return Err(fail(format!(
                "backend `{}` names template `{template}`, which kernel-templates/ does not have (it has: {})",
                variant.backend,
                self.texts.keys().filter(|name| !name.starts_with("partials/")).cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let render = |ctx: &Context| {
            if let Some(why) = self.stopped.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                return Err(fail(why));
            }
            let (tera, name, owned) = (Arc::clone(&self.tera), template.clone(), ctx.clone());
            let rendered = guard::with_deadline(move || {
                let mut output = guard::Output::default();
                let result = tera.render_to(&name, &owned, &mut output);
                (result, output)
            });
            match rendered {
                Err(rule) => {
                    let why = format!("template {template}: {rule}");
                    self.stopped.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| why.clone());
                    Err(fail(why))
                }
                Ok((_, guard::Output { cut: Some(rule), .. })) => Err(fail(format!("template {template}: {rule}"))),
                Ok((Err(err), _)) => Err(fail(format!("template {template}: {}", self.explain(template, &err, ctx)))),
                Ok((Ok(()), output)) => {
                    String::from_utf8(output.bytes).map_err(|_| fail(format!("template {template}: writes text that is not UTF-8")))
                }
            }
        };
        let mut ctx = context(declared);
        ctx.insert("emit", "launch");
        let declaration = render(&ctx)?;
        let decl: LaunchDecl = toml::from_str(&declaration).map_err(|err| {
            fail(format!("template {template}: its launch contract (emit = \"launch\") {}", toml_problem(&declaration, &err)))
        })?;
        // An unchecked variant takes whole tiles only; a template may ask for more.
        let mut multiples = decl.multiples.clone();
        if !variant.is_checked() {
            for (quantity, edge) in declared.family.tile.iter().zip(&variant.tile) {
                let multiple = multiples.entry(quantity.clone()).or_insert(1);
                *multiple = lcm(*multiple, *edge);
            }
        }
        let entry = Entry {
            variant: variant.clone(),
            declaration: std::sync::Arc::clone(&declared.family),
            template: template.clone(),
            source: format!("generated/{}.cu", variant.name),
            source_sha256: String::new(),
            entry: variant.name.clone(),
            launch: LaunchSpec {
                block: decl.block,
                grid: decl.grid,
                cluster: decl.cluster,
                dynamic_smem_bytes: decl.dynamic_smem_bytes,
                params: decl.params,
            },
            requires: Requirements {
                multiples,
                ld_multiple: decl.ld_multiple,
                ptr_align_bytes: decl.ptr_align_bytes,
                operand_align_bytes: decl.align,
                rules: decl.rules,
            },
            targets: Targets { sass: declared.backend.sass.clone(), ptx: declared.backend.ptx.clone() },
            gflops_per_sm: declared.backend.gflops_per_sm,
            cost_bytes: declared.backend.cost_bytes.clone(),
            bytes_in_flight: declared.backend.bytes_in_flight.clone(),
        };
        // The contract is checked before the source is rendered from it.
        entry.check().map_err(|rule| fail(format!("template {template}: {rule}")))?;
        check_trial_grids(&entry).map_err(|rule| fail(format!("template {template}: {rule}")))?;
        ctx.insert("emit", "source");
        ctx.insert("signature", &signature(&entry.launch.params, &declared.family, variant));
        let source = tidy(&render(&ctx)?);
        check_includes(&source).map_err(|rule| fail(format!("template {template}: {rule}")))?;
        let entry = Entry { source_sha256: sha256_hex(source.as_bytes()), ..entry };
        Ok(Rendered { entry, source })
    }
}

/// The multiprocessors of the largest GPU the trial grids are checked for (an H100 or H200): a
/// persistent grid is at most a block or cluster per multiprocessor.
const TRIAL_SMS: u32 = 132;

/// Checks the launch grid of each declared correctness and performance trial shape that keeps
/// the family's and the variant's rules and gives every quantity the grid needs, against
/// CUDA's limits: such a trial would otherwise fail only once a GPU runs it.
fn check_trial_grids(entry: &Entry) -> Result<(), String> {
    let family = &entry.declaration;
    let trials = &family.trials;
    let declared = trials
        .shapes
        .iter()
        .map(|shape| ("trials.shapes", shape))
        .chain((!trials.perf.is_empty()).then_some(("trials.perf", &trials.perf)));
    for (field, shape) in declared {
        let env = |name: &str| shape.get(name).copied();
        let needed: Vec<&str> = match &entry.launch.grid {
            GridRule::Expr { x, y, z, .. } => {
                [x, y, z].iter().flat_map(|e| e.names()).filter(|n| *n != tilesmith_spec::family::SMS).collect()
            }
            _ => family.tile.iter().take(2).map(String::as_str).chain(family.batch.as_deref()).collect(),
        };
        let keeps_rules = family.rules.iter().chain(&entry.requires.rules).all(|rule| rule.check(&env).is_ok());
        // A shape with nothing to compute launches nothing (the runtime plans no grid for it).
        if !keeps_rules || needed.iter().any(|name| env(name).is_none_or(|v| v == 0)) {
            continue;
        }
        let problems = family.batch.as_deref().and_then(env).unwrap_or(1);
        if let Err(rule) = entry.launch.grid_of(family, &env, problems, TRIAL_SMS) {
            let values: Vec<String> = shape.iter().map(|(q, v)| format!("{q} = {v}")).collect();
            return Err(format!(
                "{field} {{ {} }}: {rule}; a side past 65,535 blocks belongs on x, which takes up to 2^31-1",
                values.join(", ")
            ));
        }
    }
    Ok(())
}

/// What a template declares with `emit = "launch"` (partials/contract.cu.tera).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LaunchDecl {
    block: [u32; 3],
    grid: GridRule,
    #[serde(default = "no_cluster")]
    cluster: [u32; 3],
    dynamic_smem_bytes: Expr,
    /// Quantities that must be multiples of these, beyond an unchecked variant's tiles.
    #[serde(default)]
    multiples: BTreeMap<String, u32>,
    /// Leading dimensions must be multiples of this many elements.
    ld_multiple: u32,
    /// Base pointers must be aligned to this many bytes.
    ptr_align_bytes: u32,
    /// Bytes the starts of these operands must be aligned to, beyond `ptr_align_bytes`.
    #[serde(default)]
    align: BTreeMap<String, u32>,
    /// Rules of the variant's calls beyond its family's (`{ holds = "head_dim == 128", says }`).
    #[serde(default)]
    rules: Vec<Rule>,
    params: Vec<Param>,
}

fn no_cluster() -> [u32; 3] {
    [1, 1, 1]
}

/// The kernel's parameter declarations, in the contract's order: operands of the variant's
/// dtype as `T`, of another (fixed, or by a `dtype_axis`) as its type, scalars as their
/// declared type.
fn signature(params: &[Param], family: &Family, variant: &Variant) -> String {
    let declarations: Vec<String> = params
        .iter()
        .map(|param| match &param.kind {
            ParamKind::Pointer { operand, access } => {
                let element = match family.operand(operand).map(|o| family.operand_dtype(variant, o)) {
                    Some(dtype) if dtype != variant.dtype => dtype.cuda_type(),
                    _ => "T",
                };
                let constness = if *access == Access::Read { "const " } else { "" };
                format!("{constness}{element}* __restrict__ {}", param.name)
            }
            ParamKind::I32 { .. } => format!("int {}", param.name),
            ParamKind::I64 { .. } => format!("long long {}", param.name),
            ParamKind::Scalar { scalar } => {
                let ty = family.scalar(scalar).map_or("float", |s| s.ty.cuda_type());
                format!("{ty} {}", param.name)
            }
            ParamKind::TensorMap { .. } => format!("const __grid_constant__ CUtensorMap {}", param.name),
            ParamKind::Workspace { .. } => format!("void* __restrict__ {}", param.name),
        })
        .collect();
    declarations.join(", ")
}

fn lcm(a: u32, b: u32) -> u32 {
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let g = gcd(a, b).max(1);
    (a / g).saturating_mul(b)
}

/// A TOML error with the line of the declaration it points at.
fn toml_problem(text: &str, err: &toml::de::Error) -> String {
    let line = err.span().map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
    match line.and_then(|l| text.lines().nth(l - 1).map(|t| (l, t.trim()))) {
        Some((l, t)) => format!("is invalid at its line {l} (`{t}`): {}", plain_words(err.message().trim())),
        None => format!("is invalid: {}", plain_words(err.message().trim())),
    }
}

fn declared_file(project: &Project) -> std::path::PathBuf {
    project.relative(&project.variants_file()).into()
}

/// The most folders deep and the most entries the templates folder may hold.
const MAX_TEMPLATE_DEPTH: usize = 32;
const MAX_TEMPLATE_ENTRIES: usize = 100_000;

/// The `.tera` files under the templates folder `root`, by their names relative to it. Links to
/// folders are refused (one to `.` would walk forever, one to `/` the whole file system);
/// links to files are read as the files.
pub fn template_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    let mut folders = vec![(root.to_path_buf(), 0)];
    let mut seen = 0;
    while let Some((dir, depth)) = folders.pop() {
        let entries = std::fs::read_dir(&dir).with_context(|| format!("cannot read templates folder {}", dir.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot read templates folder {}", dir.display()))?;
            seen += 1;
            if seen > MAX_TEMPLATE_ENTRIES {
                bail!("{} holds more than {MAX_TEMPLATE_ENTRIES} files and folders; tilesmith reads at most that many", root.display());
            }
            let path = entry.path();
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            if path.is_dir() {
                if is_link {
                    bail!(
                        "{} is a link to a folder: tilesmith reads the templates folder's own folders only (a link may loop or lead \
                         anywhere); copy the folder in, or link its files",
                        path.display()
                    );
                }
                if depth + 1 > MAX_TEMPLATE_DEPTH {
                    bail!("{} is more than {MAX_TEMPLATE_DEPTH} folders deep in {}", path.display(), root.display());
                }
                folders.push((path, depth + 1));
            } else if path.extension().is_some_and(|ext| ext == "tera") {
                let name = path.strip_prefix(root)?.to_string_lossy().replace('\\', "/");
                files.push((name, path));
            }
        }
    }
    files.sort();
    Ok(files)
}

fn collect_templates(root: &Path, texts: &mut BTreeMap<String, String>) -> Result<()> {
    for (name, path) in template_files(root)? {
        let text = tilesmith_spec::files::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        texts.insert(name, text);
    }
    if texts.is_empty() {
        bail!("{} holds no .tera templates", root.display());
    }
    Ok(())
}

/// The values a template sees: every axis under its name, plus what follows from them.
fn context(declared: &Declared) -> Context {
    let variant = &declared.variant;
    let mut ctx = Context::new();
    ctx.insert("template", &declared.backend.template);
    ctx.insert("variant", &variant.name);
    let family = &declared.family;
    let axes = family.axes();
    let params: Vec<BTreeMap<&str, String>> =
        variant.axis_values(&axes).into_iter().map(|(axis, value)| BTreeMap::from([("axis", axis), ("value", value)])).collect();
    ctx.insert("params", &params);
    ctx.insert("family", &variant.family);
    for axis in &axes {
        if let Some(value) = variant.value(&axis.name) {
            ctx.insert(&axis.name, &value.to_json());
        }
    }
    ctx.insert("ctype", variant.dtype.cuda_type());
    ctx.insert("elem_bytes", &variant.dtype.size_bytes());
    // Each operand's element type and size, which a `dtype_axis` may set apart from `ctype`.
    let dtypes: BTreeMap<&str, _> = family.operands.iter().map(|o| (o.name.as_str(), family.operand_dtype(variant, o))).collect();
    ctx.insert("operand_dtype", &dtypes.iter().map(|(name, d)| (*name, d.as_str())).collect::<BTreeMap<_, _>>());
    ctx.insert("operand_ctype", &dtypes.iter().map(|(name, d)| (*name, d.cuda_type())).collect::<BTreeMap<_, _>>());
    ctx.insert("operand_bytes", &dtypes.iter().map(|(name, d)| (*name, d.size_bytes())).collect::<BTreeMap<_, _>>());
    ctx.insert("threads", &(variant.warps * 32));
    ctx.insert("checked", &variant.is_checked());
    ctx.insert("sass", &declared.backend.sass);
    ctx.insert("ptx", &declared.backend.ptx);
    // Tile edges by the quantity they tile: `tm`, `tn`, `tk` for a tile over m, n and k.
    for (quantity, edge) in family.tile.iter().zip(variant.tile()) {
        ctx.insert(format!("t{quantity}"), edge);
    }
    // `<operand>_row_major` for operands whose order follows an axis (`a_row_major` for an operand `a` ordered by a `layout` axis).
    for operand in &family.operands {
        if let Some(Ok((axis, index))) = operand.order.as_deref().map(|order| family.order_axis(order)) {
            let row_major = variant.word(&axis.name).is_some_and(|word| word.as_bytes().get(index) == Some(&b't'));
            ctx.insert(format!("{}_row_major", operand.name), &row_major);
        }
    }
    ctx
}

/// Refuses an `#include` of a file outside the toolchain: a fatbin is current while its
/// source's hash is, and a header read from elsewhere could change unseen. Headers of the
/// toolchain (`#include <cuda_fp16.h>`) are part of the compiler's version, which is hashed.
fn check_includes(source: &str) -> Result<(), String> {
    for (line, directive) in directives(source) {
        // `include`, `include_next`, and GCC's `import`, which includes too.
        let Some(rest) = directive.strip_prefix("include").or_else(|| directive.strip_prefix("import")) else { continue };
        let target = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_').trim();
        let toolchain = target.starts_with('<') && !target[1..].starts_with('/') && !target.contains("..");
        if !toolchain {
            return Err(format!(
                "the source's line {line} includes {target}: a generated source includes only the toolchain's headers \
                 (<name.h>), since tilesmith cannot see another file change; put shared code in a partial template"
            ));
        }
    }
    Ok(())
}

/// The preprocessing directives of a C++ source as the compiler reads them, each with the line
/// it starts on and its text after the `#` (or `%:`): lines spliced where a backslash ends
/// one, comments replaced by a space, string and character literals kept whole.
fn directives(source: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = source.chars().collect();
    let mut logical = Vec::new(); // (first line, text) of each spliced line, comments removed
    let (mut text, mut first, mut line) = (String::new(), 1, 1);
    let (mut i, mut in_block, mut quote) = (0, false, None::<char>);
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && chars.get(i + 1) == Some(&'\n') {
            (i, line) = (i + 2, line + 1);
            continue;
        }
        if c == '\n' {
            line += 1;
            i += 1;
            if !in_block {
                logical.push((first, std::mem::take(&mut text)));
                first = line;
                quote = None;
            }
            continue;
        }
        if in_block {
            if c == '*' && chars.get(i + 1) == Some(&'/') {
                (in_block, i) = (false, i + 2);
                text.push(' ');
            } else {
                i += 1;
            }
            continue;
        }
        match quote {
            Some(q) => {
                text.push(c);
                if c == '\\' {
                    text.extend(chars.get(i + 1));
                    i += 1;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '/' && chars.get(i + 1) == Some(&'*') => {
                in_block = true;
                i += 1;
            }
            None if c == '/' && chars.get(i + 1) == Some(&'/') => {
                while i + 1 < chars.len() && chars[i + 1] != '\n' {
                    // A line comment ends at the newline, after splices.
                    if chars[i + 1] == '\\' && chars.get(i + 2) == Some(&'\n') {
                        line += 1;
                        i += 1;
                    }
                    i += 1;
                }
            }
            None => {
                if c == '"' || c == '\'' {
                    quote = Some(c);
                }
                text.push(c);
            }
        }
        i += 1;
    }
    logical.push((first, text));
    logical
        .into_iter()
        .filter_map(|(line, text)| {
            let text = text.trim_start();
            let rest = text.strip_prefix('#').or_else(|| text.strip_prefix("%:"))?;
            Some((line, rest.trim_start().to_string()))
        })
        .collect()
}

/// Trims trailing spaces and runs of blank lines that template tags leave behind.
fn tidy(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut blank = 0;
    for line in source.trim_start().lines() {
        let line = line.trim_end();
        blank = if line.is_empty() { blank + 1 } else { 0 };
        if blank <= 1 {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// A Tera error's messages, outermost first; the last is a `throw` rule or what was not found.
fn messages(err: &tera::Error) -> Vec<String> {
    let mut parts = vec![err.to_string()];
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        parts.push(inner.to_string());
        source = inner.source();
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Includes hidden from a line-by-line reading are found as the compiler finds them.
    #[test]
    fn includes_are_read_as_the_preprocessor_reads_them() {
        for hidden in [
            "/**/#include \"/abs/h\"",
            "# /**/ include \"x.h\"",
            "#inc\\\nlude \"x.h\"",
            "#\\\ninclude \"x.h\"",
            "  %:include \"x.h\"",
            "#include_next <../x.h>",
            "#import \"x.h\"",
            "/* a\n comment */ #include \"x.h\"",
        ] {
            let source = format!("int a;\n{hidden}\nint b;\n");
            let err = check_includes(&source).expect_err(hidden);
            assert!(err.contains("the source's line 2 includes") || err.contains("line 3 includes"), "{hidden}: {err}");
        }
        let fine =
            "#include <cuda_fp16.h>\n// #include \"x.h\"\n/* #include \"y.h\" */\nconst char* s = \"#include \\\"z.h\\\"\";\n#define X 1\n";
        check_includes(fine).unwrap();
    }

    /// Every name a template sees beside the axes is one the family checks refuse for an axis.
    #[test]
    fn names_beside_the_axes_are_reserved() {
        let config = tilesmith_spec::Config::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../variants.toml")).unwrap();
        for declared in &config.variants {
            let axes: Vec<String> = declared.family.axes().into_iter().map(|a| a.name).collect();
            let json = context(declared).into_json();
            for name in json.as_object().unwrap().keys().map(String::as_str) {
                let reserved = tilesmith_spec::family::TEMPLATE_NAMES.contains(&name)
                    || name.strip_prefix('t').is_some_and(|q| declared.family.tile.iter().any(|edge| edge == q))
                    || name.strip_suffix("_row_major").is_some_and(|o| declared.family.operands.iter().any(|d| d.name == o));
                assert!(reserved || axes.iter().any(|a| a == name), "{}: `{name}` is neither an axis nor reserved", declared.variant.name);
            }
        }
    }
}
