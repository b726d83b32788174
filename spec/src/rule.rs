//! A rule between a call's quantities, stated with the reason a user reads when a call breaks
//! it: `{ holds = "heads % kv_heads == 0", says = "heads must be a multiple of kv_heads" }`.
//! A family declares those every call obeys; a template's launch contract those of its
//! variant (a head size it was built for, a mask it cannot apply to every shape). The runtime
//! checks both before launching, and a call that breaks one writes nothing.

use crate::expr::Expr;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Two expressions and how they compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub left: Expr,
    pub compare: Compare,
    pub right: Expr,
    /// What the rule means, in the words a refused call shows.
    pub says: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Longest first, so that `<=` is not read as `<`.
const COMPARES: [(&str, Compare); 6] =
    [("==", Compare::Eq), ("!=", Compare::Ne), ("<=", Compare::Le), (">=", Compare::Ge), ("<", Compare::Lt), (">", Compare::Gt)];

impl Compare {
    fn symbol(self) -> &'static str {
        COMPARES.iter().find(|(_, c)| *c == self).map_or("==", |(s, _)| s)
    }

    fn holds(self, a: u64, b: u64) -> bool {
        match self {
            Compare::Eq => a == b,
            Compare::Ne => a != b,
            Compare::Lt => a < b,
            Compare::Le => a <= b,
            Compare::Gt => a > b,
            Compare::Ge => a >= b,
        }
    }
}

impl Rule {
    /// Parses `holds`: two expressions ([`Expr`]) with one of `== != < <= > >=` between them.
    pub fn parse(holds: &str, says: &str) -> Result<Rule, String> {
        // Scanned by characters: a byte inside a multi-byte one is no place to slice.
        let found: Vec<(usize, &str, Compare)> = holds
            .char_indices()
            .filter_map(|(at, _)| COMPARES.iter().find(|(s, _)| holds[at..].starts_with(s)).map(|&(s, c)| (at, s, c)))
            .collect();
        // `<=` also matches as `<` one byte on: keep the matches that do not start inside another.
        let mut compares = Vec::new();
        for (at, symbol, compare) in found {
            if compares.last().is_none_or(|&(end, _, _): &(usize, usize, Compare)| at >= end) {
                compares.push((at + symbol.len(), at, compare));
            }
        }
        let [(end, at, compare)] = compares[..] else {
            return Err(format!("rule `{holds}`: write two expressions with one of ==, !=, <, <=, >, >= between them"));
        };
        if says.trim().is_empty() {
            return Err(format!("rule `{holds}`: `says` is empty; state the rule in words for the calls that break it"));
        }
        let side = |text: &str| Expr::parse(text).map_err(|e| format!("rule `{holds}`: {e}"));
        Ok(Rule { left: side(&holds[..at])?, compare, right: side(&holds[end..])?, says: says.trim().to_string() })
    }

    /// The names it uses.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.left.names().into_iter().chain(self.right.names())
    }

    /// A name it uses that `known` does not hold, if any, as [`Expr::check_names`] says it.
    pub fn check_names(&self, known: &[&str]) -> Result<(), String> {
        match self.names().find(|name| !known.contains(name)) {
            Some(name) => Err(format!("rule `{self}` uses `{name}`, which is not one of: {}", known.join(", "))),
            None => Ok(()),
        }
    }

    /// Whether a call with these values keeps it: Ok, or the refusal naming the rule, its words
    /// and the values it read.
    pub fn check(&self, value: &dyn Fn(&str) -> Option<u64>) -> Result<(), String> {
        let (a, b) =
            (self.left.eval(value).map_err(|e| self.broken(value, &e))?, self.right.eval(value).map_err(|e| self.broken(value, &e))?);
        if self.compare.holds(a, b) {
            Ok(())
        } else {
            Err(self.broken(value, &format!("{a} {} {b} is false", self.compare.symbol())))
        }
    }

    /// Refuses a rule no call keeps (`1 == 2`, `rows < 0`): it would refuse every call. Tried
    /// with each of its names (up to three) over the powers of two, the numbers the rule names
    /// and their neighbours, where that is at most 2^20 evaluations; a rule past that is let be.
    pub fn check_can_hold(&self) -> Result<(), String> {
        let mut names: Vec<&str> = self.names().collect();
        names.sort_unstable();
        names.dedup();
        if names.len() > 3 {
            return Ok(());
        }
        let text = self.to_string();
        let numbers = text.split(|c: char| !c.is_ascii_digit()).filter_map(|word| word.parse::<u64>().ok());
        let mut probes: Vec<u64> = (0..32).map(|k| 1u64 << k).chain([0, 3]).collect();
        for n in numbers {
            probes.extend([n.saturating_sub(1), n, n.saturating_add(1)]);
        }
        probes.sort_unstable();
        probes.dedup();
        let Some(combinations) = probes.len().checked_pow(names.len() as u32).filter(|&c| c <= 1 << 20) else {
            return Ok(());
        };
        let holds = (0..combinations).any(|mut index| {
            let mut values = Vec::with_capacity(names.len());
            for _ in &names {
                values.push(probes[index % probes.len()]);
                index /= probes.len();
            }
            // Evaluated without the words of a refusal, which `check` would format each time.
            let value = |name: &str| names.iter().position(|n| *n == name).map(|at| values[at]);
            matches!((self.left.eval(&value), self.right.eval(&value)), (Ok(a), Ok(b)) if self.compare.holds(a, b))
        });
        if holds {
            Ok(())
        } else {
            Err(format!("rule `{self}` holds for no call: every call would be refused"))
        }
    }

    fn broken(&self, value: &dyn Fn(&str) -> Option<u64>, why: &str) -> String {
        let mut names: Vec<&str> = self.names().collect();
        names.sort_unstable();
        names.dedup();
        let values: Vec<String> = names.iter().map(|n| value(n).map_or(format!("{n} not given"), |v| format!("{n} = {v}"))).collect();
        format!("the call breaks the rule `{self}` ({}: {why}): {}", values.join(", "), self.says)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.left, self.compare.symbol(), self.right)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Text {
    holds: String,
    says: String,
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Text { holds: self.to_string(), says: self.says.clone() }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rule, D::Error> {
        let text = Text::deserialize(deserializer)?;
        Rule::parse(&text.holds, &text.says).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(pairs: &'a [(&'a str, u64)]) -> impl Fn(&str) -> Option<u64> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    #[test]
    fn rules_compare_two_expressions_and_name_what_broke_them() {
        let rule = Rule::parse("heads % kv_heads == 0", "heads must be a multiple of kv_heads").unwrap();
        assert_eq!(rule.to_string(), "heads % kv_heads == 0");
        assert_eq!(rule.check(&values(&[("heads", 32), ("kv_heads", 8)])), Ok(()));
        let message = rule.check(&values(&[("heads", 12), ("kv_heads", 5)])).unwrap_err();
        assert_eq!(
            message,
            "the call breaks the rule `heads % kv_heads == 0` (heads = 12, kv_heads = 5: 2 == 0 is false): heads must be a multiple of kv_heads"
        );
        // A division by zero is a broken rule, not a panic.
        let message = rule.check(&values(&[("heads", 12), ("kv_heads", 0)])).unwrap_err();
        assert!(message.contains("kv_heads = 0") && message.contains("divides by zero"), "{message}");
        let le = Rule::parse("seq_q<=seq_k", "a bottom-right causal mask needs seq_q <= seq_k").unwrap();
        assert_eq!(le.compare, Compare::Le);
        assert!(le.check(&values(&[("seq_q", 5), ("seq_k", 5)])).is_ok() && le.check(&values(&[("seq_q", 6), ("seq_k", 5)])).is_err());
        for (holds, compare) in [("a != 1", Compare::Ne), ("a < 1", Compare::Lt), ("a > 1", Compare::Gt), ("a >= 1", Compare::Ge)] {
            assert_eq!(Rule::parse(holds, "x").unwrap().compare, compare);
        }
    }

    #[test]
    fn malformed_rules_are_refused_naming_them() {
        for (holds, says, rule) in [
            ("heads % kv_heads", "x", "write two expressions with one of"),
            ("a < b < c", "x", "write two expressions with one of"),
            ("a =< b", "x", "unexpected"),
            ("a == ", "x", "an expression is empty"),
            ("a == b", " ", "`says` is empty"),
            ("é == 1", "x", "unexpected character `é`"),
            ("h < é", "x", "unexpected character `é`"),
        ] {
            let message = Rule::parse(holds, says).unwrap_err();
            assert!(message.contains(rule), "{holds}: {message}");
        }
    }
}
