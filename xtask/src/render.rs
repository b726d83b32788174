//! Expands a declared variant through its Tera template into CUDA source and launch data.

use crate::project::Project;
use anyhow::{bail, Context as _, Result};
use std::collections::BTreeMap;
use std::path::Path;
use tera::{Context, Tera};
use tilesmith_spec::{arch, Declared, Diagnostic, Entry, GridRule, Kind, Requirements, Targets};

/// A variant's rendered source and manifest entry.
pub struct Rendered {
    pub entry: Entry,
    pub source: String,
}

/// The templates of a project, parsed once.
pub struct Renderer {
    tera: Tera,
    /// Each template's text by its name, to point compiler errors back at template lines.
    pub texts: BTreeMap<String, String>,
}

impl Renderer {
    pub fn load(project: &Project) -> Result<Renderer> {
        let dir = project.templates_dir();
        let mut texts = BTreeMap::new();
        collect_templates(&dir, &dir, &mut texts)?;
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        // All at once: templates import partials, which must be known when they are parsed.
        tera.add_raw_templates(texts.iter().map(|(name, text)| (name.as_str(), text.as_str())))
            .map_err(|err| anyhow::anyhow!("in {}: {}", project.relative(&dir), messages(&err).join(": ")))?;
        Ok(Renderer { tera, texts })
    }

    /// Renders one variant, or says which rule it breaks, located at its line of `variants.toml`.
    pub fn render(&self, project: &Project, declared: &Declared) -> Result<Rendered, Diagnostic> {
        let variant = &declared.variant;
        let template = &declared.backend.template;
        let fail = |rule: String| Diagnostic {
            file: declared_file(project),
            line: declared.line,
            variant: Some(variant.name.clone()),
            rule,
        };
        if !self.texts.contains_key(template) {
            return Err(fail(format!(
                "backend `{}` names template `{template}`, which kernel-templates/ does not have (it has: {})",
                variant.backend,
                self.texts.keys().filter(|name| !name.starts_with("partials/")).cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let source = self
            .tera
            .render(template, &context(declared))
            .map_err(|err| fail(format!("template {template}: {}", messages(&err).pop().unwrap_or_default())))?;
        let launch = parse_launch(&source).map_err(|err| fail(format!("template {template}: {err}")))?;
        for sass in &declared.backend.sass {
            let limit = arch::smem_limit(sass).unwrap_or(0);
            if launch.dynamic_smem_bytes > limit {
                return Err(fail(format!(
                    "needs {} bytes of dynamic shared memory, over the {limit}-byte limit of {sass}",
                    launch.dynamic_smem_bytes
                )));
            }
        }
        let tile = variant.tile();
        let grid = match launch.grid.as_str() {
            "tiles_mn" => GridRule::TilesMn { tm: tile[0], tn: tile[1] },
            other => return Err(fail(format!("template {template} declares unknown grid rule `{other}` (known: tiles_mn)"))),
        };
        let shape_multiple = match (variant.is_checked(), &variant.kind) {
            (true, _) => [1, 1, 1],
            (false, Kind::Gemm { tile, .. }) => *tile,
            (false, Kind::Transpose { tile }) => [tile[0], tile[1], 1],
        };
        let entry = Entry {
            variant: variant.clone(),
            template: template.clone(),
            source: format!("generated/{}.cu", variant.name),
            entry: variant.name.clone(),
            block: [variant.warps * 32, 1, 1],
            grid,
            dynamic_smem_bytes: launch.dynamic_smem_bytes,
            requires: Requirements {
                shape_multiple,
                ld_multiple: launch.ld_multiple,
                ptr_align_bytes: launch.ptr_align_bytes,
            },
            targets: Targets { sass: declared.backend.sass.clone(), ptx: declared.backend.ptx.clone() },
        };
        Ok(Rendered { entry, source: tidy(&source) })
    }
}

fn declared_file(project: &Project) -> std::path::PathBuf {
    project.relative(&project.variants_file()).into()
}

fn collect_templates(root: &Path, dir: &Path, texts: &mut BTreeMap<String, String>) -> Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("cannot read templates folder {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            collect_templates(root, &path, texts)?;
        } else if path.extension().is_some_and(|ext| ext == "tera") {
            let name = path.strip_prefix(root)?.to_string_lossy().replace('\\', "/");
            let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
            texts.insert(name, text);
        }
    }
    if texts.is_empty() {
        bail!("{} holds no .tera templates", dir.display());
    }
    Ok(())
}

/// The values a template sees: every axis, plus what follows from them.
fn context(declared: &Declared) -> Context {
    let variant = &declared.variant;
    let mut ctx = Context::new();
    ctx.insert("template", &declared.backend.template);
    ctx.insert("variant", &variant.name);
    let params: Vec<BTreeMap<&str, String>> = variant
        .axes()
        .into_iter()
        .map(|(axis, value)| BTreeMap::from([("axis", axis.to_string()), ("value", value)]))
        .collect();
    ctx.insert("params", &params);
    ctx.insert("family", variant.family().as_str());
    ctx.insert("backend", &variant.backend);
    ctx.insert("dtype", variant.dtype.as_str());
    ctx.insert("ctype", variant.dtype.cuda_type());
    ctx.insert("elem_bytes", &variant.dtype.size_bytes());
    ctx.insert("warps", &variant.warps);
    ctx.insert("threads", &(variant.warps * 32));
    ctx.insert("checked", &variant.is_checked());
    ctx.insert("sass", &declared.backend.sass);
    ctx.insert("ptx", &declared.backend.ptx);
    let tile = variant.tile();
    ctx.insert("tm", &tile[0]);
    ctx.insert("tn", &tile[1]);
    if let Kind::Gemm { layout, tile, stages } = variant.kind {
        ctx.insert("layout", layout.as_str());
        ctx.insert("a_row_major", &layout.a_row_major());
        ctx.insert("b_row_major", &layout.b_row_major());
        ctx.insert("tk", &tile[2]);
        ctx.insert("stages", &stages);
    }
    ctx
}

/// What a template declares in its `// launch:` line (partials/contract.cu.tera).
struct Launch {
    dynamic_smem_bytes: u32,
    grid: String,
    ld_multiple: u32,
    ptr_align_bytes: u32,
}

fn parse_launch(source: &str) -> Result<Launch, String> {
    let line = source
        .lines()
        .find_map(|line| line.trim().strip_prefix("// launch:"))
        .ok_or("declares no launch data: call contract::launch(...) from partials/contract.cu.tera")?;
    let fields: BTreeMap<&str, &str> = line.split_whitespace().filter_map(|field| field.split_once('=')).collect();
    let number = |key: &str| -> Result<u32, String> {
        let text = fields.get(key).ok_or(format!("launch line lacks `{key}`"))?;
        text.parse().map_err(|_| format!("launch line: `{key}={text}` is not a whole number"))
    };
    Ok(Launch {
        dynamic_smem_bytes: number("dynamic_smem_bytes")?,
        grid: fields.get("grid").ok_or("launch line lacks `grid`")?.to_string(),
        ld_multiple: number("ld_multiple")?.max(1),
        ptr_align_bytes: number("ptr_align_bytes")?.max(1),
    })
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
