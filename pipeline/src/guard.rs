//! Bounds on what a project's templates may do, so that a template that never ends, recurses or
//! grows without limit is an error naming it rather than a hung or aborted process: nesting
//! depth (checked before Tera parses, since its parser recurses), include and macro recursion
//! (checked on the parsed templates), `range` lengths, and each render's output and time.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::{Duration, Instant};
use tera::ast::{Expr, ExprVal, Node};
use tera::{Tera, Value};

/// The deepest nesting of tags (`if`, `for`, `macro`, ...) or of brackets within a tag.
pub const MAX_NESTING: usize = 64;
/// The longest a tag may be (`{{ ... }}`, `{% ... %}`): Tera parses and evaluates an
/// expression of n terms n calls deep.
pub const MAX_TAG_BYTES: usize = 4096;
/// The longest chain of includes and macro calls one render may go through.
pub const MAX_CALL_DEPTH: usize = 128;
/// The most memory one render may take (the process's resident memory growing past it while a
/// render runs stops the render).
pub const MAX_RENDER_MEMORY: u64 = 1 << 30;
/// The most items a template's `range(...)` may produce.
pub const MAX_RANGE: usize = 1_000_000;
/// The most bytes one render of a template may write.
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;
/// The longest one render of a template may take.
pub const MAX_RENDER_TIME: Duration = Duration::from_secs(10);

/// Refuses a template nested deeper than `MAX_NESTING`, in block tags or in brackets.
pub fn check_nesting(text: &str) -> Result<(), String> {
    const OPENERS: &[&str] = &["if", "for", "macro", "block", "filter", "raw"];
    let (mut blocks, mut at) = (0usize, 0);
    while let Some(start) = text[at..].find(['{']).map(|i| at + i) {
        let close = match text[start..].get(1..2) {
            Some("%") => "%}",
            Some("{") => "}}",
            _ => {
                at = start + 1;
                continue;
            }
        };
        let end = text[start + 2..].find(close).map_or(text.len(), |i| start + 2 + i);
        let inner = &text[start + 2..end];
        let (mut brackets, mut deepest) = (0usize, 0usize);
        for c in inner.chars() {
            match c {
                '(' | '[' => {
                    brackets += 1;
                    deepest = deepest.max(brackets);
                }
                ')' | ']' => brackets = brackets.saturating_sub(1),
                _ => {}
            }
        }
        let word = inner.trim_matches(['-', ' ', '\t', '\n', '\r']).split_whitespace().next().unwrap_or("");
        if close == "%}" && OPENERS.contains(&word) {
            blocks += 1;
        } else if close == "%}" && word.starts_with("end") {
            blocks = blocks.saturating_sub(1);
        }
        let line = || text[..start].matches('\n').count() + 1;
        if deepest > MAX_NESTING || blocks > MAX_NESTING {
            return Err(format!("line {}: nests tags or brackets deeper than the limit of {MAX_NESTING}", line()));
        }
        if inner.len() > MAX_TAG_BYTES {
            return Err(format!("line {}: a tag of {} bytes, past the limit of {MAX_TAG_BYTES}", line(), inner.len()));
        }
        at = end;
    }
    Ok(())
}

/// A template's top level, or one of its macros: what may be entered while rendering.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Body {
    Template(String),
    Macro(String, String),
}

impl Body {
    fn show(&self) -> String {
        match self {
            Body::Template(name) => name.clone(),
            Body::Macro(template, name) => format!("macro {name} of {template}"),
        }
    }
}

/// Refuses a template that includes itself, a macro that calls itself, or any longer cycle of
/// includes and macro calls, and chains of them deeper than `MAX_CALL_DEPTH`: Tera would
/// recurse until the stack overflows.
pub fn check_recursion(tera: &Tera) -> Result<(), String> {
    let mut edges: BTreeMap<Body, Vec<Body>> = BTreeMap::new();
    for name in tera.get_template_names() {
        let Ok(template) = tera.get_template(name) else { continue };
        let imports: HashMap<&str, &str> =
            template.imported_macro_files.iter().map(|(file, namespace)| (namespace.as_str(), file.as_str())).collect();
        let resolve = |namespace: &str, macro_name: &str| {
            let file = if namespace == "self" { Some(name) } else { imports.get(namespace).copied() };
            file.map(|file| Body::Macro(file.to_string(), macro_name.to_string()))
        };
        let mut top = Vec::new();
        calls(&template.ast, &resolve, &mut top);
        edges.insert(Body::Template(name.to_string()), top);
        for (macro_name, definition) in &template.macros {
            let mut inner = Vec::new();
            calls(&definition.body, &resolve, &mut inner);
            edges.insert(Body::Macro(name.to_string(), macro_name.clone()), inner);
        }
    }
    // Depth-first without recursion: a body met again while still open closes a cycle. A body
    // done has its depth: the longest chain of bodies it enters, itself included.
    let mut state: BTreeMap<&Body, bool> = BTreeMap::new(); // false: open, true: done
    let mut depth: BTreeMap<&Body, usize> = BTreeMap::new();
    for start in edges.keys() {
        if state.contains_key(start) {
            continue;
        }
        let mut path: Vec<(&Body, usize)> = vec![(start, 0)];
        state.insert(start, false);
        while let Some((body, next)) = path.last_mut() {
            let callees = edges.get(*body).map(Vec::as_slice).unwrap_or_default();
            let Some(callee) = callees.get(*next) else {
                let deepest = callees.iter().filter_map(|c| depth.get(c)).max().copied().unwrap_or(0) + 1;
                if deepest > MAX_CALL_DEPTH {
                    return Err(format!(
                        "{} enters a chain of {deepest} includes and macro calls, past the limit of {MAX_CALL_DEPTH}",
                        body.show()
                    ));
                }
                depth.insert(body, deepest);
                state.insert(body, true);
                path.pop();
                continue;
            };
            *next += 1;
            let Some((callee, _)) = edges.get_key_value(callee) else { continue };
            match state.get(callee) {
                Some(false) => {
                    let from = path.iter().position(|(b, _)| *b == callee).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..].iter().map(|(b, _)| b.show()).collect();
                    cycle.push(callee.show());
                    return Err(format!(
                        "{} recurses ({}); templates may not include or call themselves",
                        callee.show(),
                        cycle.join(" → ")
                    ));
                }
                Some(true) => {}
                None => {
                    state.insert(callee, false);
                    path.push((callee, 0));
                }
            }
        }
    }
    Ok(())
}

/// The includes and macro calls in `nodes`, in order.
fn calls(nodes: &[Node], resolve: &dyn Fn(&str, &str) -> Option<Body>, out: &mut Vec<Body>) {
    for node in nodes {
        match node {
            Node::Include(_, names, _) => out.extend(names.iter().map(|n| Body::Template(n.clone()))),
            Node::VariableBlock(_, expr) => expr_calls(expr, resolve, out),
            Node::Set(_, set) => expr_calls(&set.value, resolve, out),
            Node::FilterSection(_, section, _) => {
                section.filter.args.values().for_each(|e| expr_calls(e, resolve, out));
                calls(&section.body, resolve, out);
            }
            Node::Block(_, block, _) => calls(&block.body, resolve, out),
            Node::Forloop(_, forloop, _) => {
                expr_calls(&forloop.container, resolve, out);
                calls(&forloop.body, resolve, out);
                calls(forloop.empty_body.as_deref().unwrap_or_default(), resolve, out);
            }
            Node::If(branches, _) => {
                for (_, condition, body) in &branches.conditions {
                    expr_calls(condition, resolve, out);
                    calls(body, resolve, out);
                }
                calls(branches.otherwise.as_ref().map(|(_, body)| body.as_slice()).unwrap_or_default(), resolve, out);
            }
            _ => {}
        }
    }
}

fn expr_calls(expr: &Expr, resolve: &dyn Fn(&str, &str) -> Option<Body>, out: &mut Vec<Body>) {
    for filter in &expr.filters {
        filter.args.values().for_each(|e| expr_calls(e, resolve, out));
    }
    match &expr.val {
        ExprVal::MacroCall(call) => {
            out.extend(resolve(&call.namespace, &call.name));
            call.args.values().for_each(|e| expr_calls(e, resolve, out));
        }
        ExprVal::FunctionCall(call) => call.args.values().for_each(|e| expr_calls(e, resolve, out)),
        ExprVal::Math(math) => [&math.lhs, &math.rhs].into_iter().for_each(|e| expr_calls(e, resolve, out)),
        ExprVal::Logic(logic) => [&logic.lhs, &logic.rhs].into_iter().for_each(|e| expr_calls(e, resolve, out)),
        ExprVal::In(is_in) => [&is_in.lhs, &is_in.rhs].into_iter().for_each(|e| expr_calls(e, resolve, out)),
        ExprVal::Test(test) => test.args.iter().for_each(|e| expr_calls(e, resolve, out)),
        ExprVal::Array(items) => items.iter().for_each(|e| expr_calls(e, resolve, out)),
        ExprVal::StringConcat(concat) => {
            for value in &concat.values {
                expr_calls(&Expr { val: value.clone(), negated: false, filters: Vec::new() }, resolve, out);
            }
        }
        _ => {}
    }
}

/// Tera's `range(end, start = 0, step_by = 1)`, refusing more than `MAX_RANGE` items rather
/// than allocating them.
pub fn range(args: &HashMap<String, Value>) -> tera::Result<Value> {
    let number = |name: &str, default: Option<u64>| -> tera::Result<u64> {
        match (args.get(name), default) {
            (Some(value), _) => {
                value.as_u64().ok_or_else(|| tera::Error::msg(format!("range: `{name}` must be a non-negative integer, got {value}")))
            }
            (None, Some(default)) => Ok(default),
            (None, None) => Err(tera::Error::msg(format!("range: `{name}` is required"))),
        }
    };
    let (start, end, step) = (number("start", Some(0))?, number("end", None)?, number("step_by", Some(1))?);
    if step == 0 {
        return Err(tera::Error::msg("range: `step_by` must be at least 1"));
    }
    if start > end {
        return Err(tera::Error::msg(format!("range: start ({start}) is after end ({end})")));
    }
    let count = (end - start).div_ceil(step);
    if count > MAX_RANGE as u64 {
        return Err(tera::Error::msg(format!("range: {count} items is more than the limit of {MAX_RANGE}")));
    }
    Ok(Value::Array((start..end).step_by(step as usize).map(Value::from).collect()))
}

/// Where a render writes: refuses more than `MAX_OUTPUT_BYTES`.
#[derive(Default)]
pub struct Output {
    pub bytes: Vec<u8>,
    /// Why the render was cut short, if it was.
    pub cut: Option<String>,
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_OUTPUT_BYTES {
            let rule = format!("writes more than the limit of {} MiB", MAX_OUTPUT_BYTES >> 20);
            self.cut = Some(rule.clone());
            return Err(std::io::Error::other(rule));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `render` on a thread of its own and waits at most `MAX_RENDER_TIME` for it, and while
/// the process's resident memory stays within `MAX_RENDER_MEMORY` of what it was: past either,
/// an error, and the render is left to end with the process (a thread cannot be stopped; the
/// renderer renders nothing more of that template, and gen then fails).
pub fn with_deadline<R: Send + 'static>(render: impl FnOnce() -> R + Send + 'static) -> Result<R, String> {
    let (send, receive) = std::sync::mpsc::channel();
    let started = Instant::now();
    let memory_before = resident_bytes();
    std::thread::Builder::new()
        // Room for the nesting `check_nesting` allows, in a debug build too.
        .stack_size(64 << 20)
        .spawn(move || {
            let _ = send.send(render());
        })
        .map_err(|err| format!("cannot start a thread to render on: {err}"))?;
    loop {
        match receive.recv_timeout(Duration::from_millis(5)) {
            Ok(rendered) => return Ok(rendered),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err("stopped rendering unexpectedly (the renderer panicked)".to_string())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if started.elapsed() > MAX_RENDER_TIME {
            return Err(format!(
                "did not finish rendering within the limit of {} s (given up after {:.0?})",
                MAX_RENDER_TIME.as_secs(),
                started.elapsed()
            ));
        }
        if let (Some(before), Some(now)) = (memory_before, resident_bytes()) {
            if now.saturating_sub(before) > MAX_RENDER_MEMORY {
                return Err(format!("grew past the limit of {} MiB of memory while rendering", MAX_RENDER_MEMORY >> 20));
            }
        }
    }
}

/// The process's resident memory in bytes, where the system says (Linux's /proc/self/status,
/// `VmRSS` in kB, whatever the page size).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status.lines().find_map(|line| line.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}
