//! Integer expressions over named quantities, as families and launch contracts write them:
//! `2 * rows * cols * elem`, `cdiv(rows, 4)`, `min(rows, 8 * sms)`. Evaluated in u64 with
//! checked arithmetic: an overflow, a division by zero or an unknown name is an error, never a
//! wrap or a panic. An expression is held in postfix order, so that evaluating and dropping it
//! never recurse; parsing recurses only per parenthesis or call, at most `MAX_DEPTH` deep.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeSet;
use std::fmt;

/// The longest expression accepted, in bytes of text.
pub const MAX_LEN: usize = 4096;
/// The deepest nesting of parentheses and calls accepted.
pub const MAX_DEPTH: usize = 64;

/// A parsed expression; it reads and writes as its text.
#[derive(Clone, Debug)]
pub struct Expr {
    text: String,
    /// The operations in postfix order: operands before what applies to them.
    ops: Vec<Op>,
}

#[derive(Clone, Debug)]
enum Op {
    Number(u64),
    Name(String),
    Binary(char),
    Call(Function),
}

#[derive(Clone, Copy, Debug)]
enum Function {
    /// ⌈a / b⌉.
    Cdiv,
    Min,
    Max,
}

const FUNCTIONS: &[(&str, Function)] = &[("cdiv", Function::Cdiv), ("min", Function::Min), ("max", Function::Max)];

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Expr {}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Expr {
    /// Parses `text`: integers, names (C identifiers), `+ - * / %`, parentheses, and the
    /// functions `cdiv(a, b)` (⌈a / b⌉), `min(a, b)` and `max(a, b)`; at most `MAX_LEN` bytes
    /// and `MAX_DEPTH` nested parentheses or calls.
    pub fn parse(text: &str) -> Result<Expr, String> {
        if text.len() > MAX_LEN {
            return Err(format!("an expression of {} bytes is longer than the limit of {MAX_LEN}", text.len()));
        }
        let tokens = tokenize(text)?;
        let mut parser = Parser { tokens: &tokens, at: 0, depth: 0, ops: Vec::new() };
        parser.sum()?;
        match parser.peek() {
            None => Ok(Expr { text: text.trim().to_string(), ops: parser.ops }),
            Some(token) => Err(format!("expression `{text}`: unexpected `{token}`")),
        }
    }

    pub fn constant(value: u64) -> Expr {
        Expr { text: value.to_string(), ops: vec![Op::Number(value)] }
    }

    /// The names it uses.
    pub fn names(&self) -> BTreeSet<&str> {
        self.ops.iter().filter_map(|op| if let Op::Name(name) = op { Some(name.as_str()) } else { None }).collect()
    }

    /// Its value where it uses no name.
    pub fn as_constant(&self) -> Option<u64> {
        self.eval(&|_| None).ok()
    }

    /// A name it uses that `known` does not hold, if any, with the known names for the message.
    pub fn check_names(&self, known: &[&str]) -> Result<(), String> {
        match self.names().into_iter().find(|name| !known.contains(name)) {
            Some(name) => Err(format!("expression `{}` uses `{name}`, which is not one of: {}", self.text, known.join(", "))),
            None => Ok(()),
        }
    }

    /// Its value with names looked up in `env`.
    pub fn eval(&self, env: &dyn Fn(&str) -> Option<u64>) -> Result<u64, String> {
        eval(&self.ops, env).map_err(|rule| format!("`{}`: {rule}", self.text))
    }
}

fn eval(ops: &[Op], env: &dyn Fn(&str) -> Option<u64>) -> Result<u64, String> {
    let mut stack: Vec<u64> = Vec::new();
    for op in ops {
        let value = match op {
            Op::Number(n) => *n,
            Op::Name(name) => env(name).ok_or_else(|| format!("`{name}` has no value here"))?,
            Op::Binary(op) => {
                let (a, b) = pop_two(&mut stack)?;
                let value = match op {
                    '+' => a.checked_add(b),
                    '-' => a.checked_sub(b),
                    '*' => a.checked_mul(b),
                    '/' => a.checked_div(b),
                    _ => a.checked_rem(b),
                };
                value.ok_or_else(|| format!("{a} {op} {b} overflows or divides by zero"))?
            }
            Op::Call(function) => {
                let (a, b) = pop_two(&mut stack)?;
                match function {
                    Function::Cdiv if b == 0 => return Err(format!("cdiv({a}, 0) divides by zero")),
                    Function::Cdiv => a.div_ceil(b),
                    Function::Min => a.min(b),
                    Function::Max => a.max(b),
                }
            }
        };
        stack.push(value);
    }
    match stack[..] {
        [value] => Ok(value),
        _ => Err("is not a well-formed expression".into()),
    }
}

fn pop_two(stack: &mut Vec<u64>) -> Result<(u64, u64), String> {
    match (stack.pop(), stack.pop()) {
        (Some(b), Some(a)) => Ok((a, b)),
        _ => Err("is not a well-formed expression".into()),
    }
}

fn tokenize(text: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, next)) = chars.peek() {
                if !(next.is_ascii_alphanumeric() || next == '_') {
                    break;
                }
                end = i + next.len_utf8();
                chars.next();
            }
            tokens.push(text[start..end].to_string());
        } else if "+-*/%(),".contains(c) {
            tokens.push(c.to_string());
        } else {
            return Err(format!("expression `{text}`: unexpected character `{c}`"));
        }
    }
    if tokens.is_empty() {
        return Err("an expression is empty".into());
    }
    Ok(tokens)
}

struct Parser<'a> {
    tokens: &'a [String],
    at: usize,
    /// Parentheses and calls open around the current token.
    depth: usize,
    ops: Vec<Op>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn next(&mut self) -> Option<&str> {
        self.at += 1;
        self.tokens.get(self.at - 1).map(String::as_str)
    }

    fn expect(&mut self, token: &str) -> Result<(), String> {
        match self.next() {
            Some(t) if t == token => Ok(()),
            Some(t) => Err(format!("expected `{token}`, found `{t}`")),
            None => Err(format!("expected `{token}` at the end")),
        }
    }

    fn sum(&mut self) -> Result<(), String> {
        self.product()?;
        while let Some(op @ ("+" | "-")) = self.peek() {
            let op = op.chars().next().unwrap_or('+');
            self.at += 1;
            self.product()?;
            self.ops.push(Op::Binary(op));
        }
        Ok(())
    }

    fn product(&mut self) -> Result<(), String> {
        self.atom()?;
        while let Some(op @ ("*" | "/" | "%")) = self.peek() {
            let op = op.chars().next().unwrap_or('*');
            self.at += 1;
            self.atom()?;
            self.ops.push(Op::Binary(op));
        }
        Ok(())
    }

    /// Opens a parenthesis or a call, refusing past `MAX_DEPTH`.
    fn nest(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("an expression nests parentheses and calls deeper than the limit of {MAX_DEPTH}"));
        }
        Ok(())
    }

    fn atom(&mut self) -> Result<(), String> {
        let token = self.next().ok_or("an expression ends where a value was expected")?.to_string();
        if token == "(" {
            self.nest()?;
            self.sum()?;
            self.expect(")")?;
            self.depth -= 1;
            return Ok(());
        }
        if token.starts_with(|c: char| c.is_ascii_digit()) {
            let number = token.parse().map_err(|_| format!("`{token}` is not an integer below 2^64"))?;
            self.ops.push(Op::Number(number));
            return Ok(());
        }
        if !crate::variant::is_c_identifier(&token) {
            return Err(format!("unexpected `{token}`"));
        }
        if self.peek() == Some("(") {
            let Some(&(_, function)) = FUNCTIONS.iter().find(|(name, _)| *name == token) else {
                return Err(format!("unknown function `{token}` (known: cdiv, min, max)"));
            };
            self.at += 1;
            self.nest()?;
            self.sum()?;
            self.expect(",")?;
            self.sum()?;
            self.expect(")")?;
            self.depth -= 1;
            self.ops.push(Op::Call(function));
            return Ok(());
        }
        self.ops.push(Op::Name(token));
        Ok(())
    }
}

impl Serialize for Expr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Expr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Expr, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Expr;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a whole number or an integer expression in a string (\"cdiv(rows, 4)\")")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Expr, E> {
                Ok(Expr::constant(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Expr, E> {
                u64::try_from(n).map(Expr::constant).map_err(|_| E::custom(format!("{n} is negative: expressions take values from 0 up")))
            }
            fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Expr, E> {
                Err(E::custom(format!("{x} is not a whole number: expressions are integer arithmetic")))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Expr, E> {
                Expr::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, env: &[(&str, u64)]) -> Result<u64, String> {
        Expr::parse(text)?.eval(&|name| env.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
    }

    #[test]
    fn precedence_functions_and_names() {
        assert_eq!(value("2 + 3 * 4", &[]), Ok(14));
        assert_eq!(value("(2 + 3) * 4 - 1", &[]), Ok(19));
        assert_eq!(value("cdiv(rows, 4) * 4", &[("rows", 13)]), Ok(16));
        assert_eq!(value("min(rows, 8 * sms) % 5", &[("rows", 10_000), ("sms", 132)]), Ok(1056 % 5));
        assert_eq!(value("max(cols * elem, 16) / 2", &[("cols", 3), ("elem", 2)]), Ok(8));
        assert_eq!(Expr::parse("2 * rows * cols").unwrap().names().into_iter().collect::<Vec<_>>(), ["cols", "rows"]);
    }

    #[test]
    fn errors_are_values() {
        assert!(value("1 - 2", &[]).unwrap_err().contains("overflows"));
        assert!(value("18446744073709551615 * 2", &[]).is_err());
        assert!(value("cdiv(1, 0)", &[]).is_err());
        assert!(value("rows", &[]).unwrap_err().contains("`rows` has no value"));
        for bad in ["", "1 +", "(1", "1 2", "f(1, 2)", "min(1)", "a $ b", "99999999999999999999"] {
            assert!(Expr::parse(bad).is_err(), "{bad}");
        }
        let unknown = Expr::parse("rows * colz").unwrap().check_names(&["rows", "cols"]).unwrap_err();
        assert!(unknown.contains("`colz`") && unknown.contains("rows, cols"), "{unknown}");
    }

    #[test]
    fn reads_as_text_or_number() {
        let e: Expr = serde_json::from_str("\"cdiv(n, 2)\"").unwrap();
        assert_eq!(serde_json::to_string(&e).unwrap(), "\"cdiv(n, 2)\"");
        let n: Expr = serde_json::from_str("4096").unwrap();
        assert_eq!(n.as_constant(), Some(4096));
        assert!(serde_json::from_str::<Expr>("\"1 +\"").is_err());
    }

    #[test]
    fn depth_and_length_are_bounded_and_long_sums_evaluate() {
        let deep = format!("{}1{}", "(".repeat(20_000), ")".repeat(20_000));
        assert!(Expr::parse(&deep).unwrap_err().contains("longer than the limit of 4096"));
        let nested = format!("{}1{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        assert!(Expr::parse(&nested).unwrap_err().contains("deeper than the limit of 64"));
        let calls = format!("{}1{}", "min(1, ".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        assert!(Expr::parse(&calls).unwrap_err().contains("deeper than the limit"));
        assert_eq!(value(&format!("{}1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH)), &[]), Ok(1));
        let flat = vec!["n"; 50_000].join(" + ");
        assert!(Expr::parse(&flat).unwrap_err().contains("longer than the limit"));
        // The longest flat sum accepted evaluates and drops without recursion.
        let terms = MAX_LEN / 4;
        assert_eq!(value(&vec!["n"; terms].join(" + "), &[("n", 3)]), Ok(3 * terms as u64));
    }
}
