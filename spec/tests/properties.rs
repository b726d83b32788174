//! Property tests: parsing variants.toml and reading manifests and tuning tables never panic,
//! whatever the text.

use proptest::prelude::*;
use std::path::Path;
use tilesmith_spec::family::Offsets;
use tilesmith_spec::family_table::FamilyTable;
use tilesmith_spec::{Config, Expr, Rule};

fn shipped() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../variants.toml")).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Ranking any times ends: valid ones are ranked, all of them; anything else is refused
    /// with the rule.
    #[test]
    fn ranking_ends_on_any_times(times in prop::collection::vec(prop_oneof![any::<f64>(), 0.001f64..10.0], 0..12)) {
        use tilesmith_spec::family_table::{rank, Timed};
        use tilesmith_spec::tuning::{MAX_MS, MIN_MS};
        let timed: Vec<Timed> = times.iter().enumerate().map(|(i, &ms)| Timed { variant: format!("v{i}"), strategy: None, ms, source: None }).collect();
        let valid = times.iter().all(|t| (MIN_MS..=MAX_MS).contains(t));
        match rank(timed) {
            Ok(ranked) => prop_assert!(valid && ranked.len() == times.len()),
            Err(rule) => prop_assert!(!valid && rule.contains("times are between 1e-6 and 1e7 ms")),
        }
    }

    /// An estimate from any times is a number or none, never a panic; a variant as fast as the
    /// fastest wherever it was timed is estimated at no slowdown.
    #[test]
    fn estimates_are_finite_and_the_fastest_everywhere_is_estimated_fastest(
        near in prop::collection::vec((0.0f64..20.0, prop::option::of(0.001f64..10.0), 0.001f64..10.0), 0..10),
    ) {
        use tilesmith_spec::family_table::estimate;
        let near: Vec<(f64, Option<f64>, f64)> = near.into_iter().map(|(d, own, fastest)| (d, own.map(|o| o.max(fastest)), fastest)).collect();
        match estimate(near.iter().copied()) {
            Some(e) => prop_assert!(e.slowdown.is_finite() && e.slowdown >= 0.0 && e.read >= 1),
            None => prop_assert!(near.iter().all(|n| n.1.is_none())),
        }
        let fastest: Vec<(f64, Option<f64>, f64)> = near.iter().map(|&(d, _, f)| (d, Some(f), f)).collect();
        prop_assert!(estimate(fastest.iter().copied()).is_none_or(|e| e.slowdown == 0.0));
    }

    /// Expressions: any text parses or is refused, and any parsed one evaluates to a value or
    /// an error (overflow, division by zero, an unknown name) with any values, never a panic.
    #[test]
    fn expressions_parse_and_evaluate_or_are_refused(
        text in "\\PC{0,30}|[a-c0-9+*/%(), -]{0,30}|(cdiv|min|max)\\([a-c0-9+*/ -]{0,10},[a-c0-9+*/ -]{0,10}\\)",
        a in any::<u64>(), b in prop_oneof![Just(0u64), any::<u64>()],
    ) {
        if let Ok(expr) = Expr::parse(&text) {
            let _ = expr.eval(&|name| match name { "a" => Some(a), "b" => Some(b), _ => None });
            prop_assert_eq!(Expr::parse(&expr.to_string()).map(|e| e.to_string()), Ok(expr.to_string()));
        }
    }

    /// Offsets: a draw fills the total with pieces no longer than the longest, and passes the
    /// check; changing one offset so that it breaks a rule fails the check, naming the operand
    /// and the element.
    #[test]
    fn drawn_offsets_keep_their_rules_and_broken_ones_are_refused(
        pieces in 0u64..40, longest in 0u64..50, fill in 0.0f64..=1.0, seed in any::<u64>(), at in any::<prop::sample::Index>(),
    ) {
        let total = ((pieces * longest) as f64 * fill) as u64;
        let mut state = seed | 1;
        let mut uniform = |lo: u64, hi: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + state % (hi - lo + 1)
        };
        let drawn = Offsets::draw(pieces, total, Some(longest), &mut uniform).expect("pieces × longest holds the total");
        prop_assert_eq!(drawn.len() as u64, pieces + 1);
        prop_assert_eq!(*drawn.last().unwrap(), total);
        let wide: Vec<i32> = drawn.iter().map(|&o| o as i32).collect();
        prop_assert_eq!(Offsets::check("cu", &wide, total, Some(longest), false), Ok(()));
        prop_assert!(drawn.windows(2).all(|w| w[1] >= w[0] && w[1] - w[0] <= longest));
        if pieces > 0 {
            let i = at.index(wide.len());
            let mut past = wide.clone();
            *past.last_mut().unwrap() = total as i32 + 1;
            let refused = Offsets::check("cu", &past, total, None, false).unwrap_err();
            prop_assert!(refused.contains("past the end") || refused.contains("must not decrease"), "{}", refused);
            let mut below = wide.clone();
            below[i] = -1;
            let refused = Offsets::check("cu", &below, total, Some(longest), false).unwrap_err();
            prop_assert!(refused.starts_with("cu["), "{}", refused);
            // The same pieces as ends only (torch's `offs`): the leading 0 implied.
            let ends = &wide[1..];
            prop_assert_eq!(Offsets::check("offs", ends, total, Some(longest), true), Ok(()));
            let mut below = ends.to_vec();
            below[at.index(ends.len())] = -1;
            let refused = Offsets::check("offs", &below, total, Some(longest), true).unwrap_err();
            prop_assert!(refused.contains("must not decrease"), "{}", refused);
            let mut past = ends.to_vec();
            *past.last_mut().unwrap() = total as i32 + 1;
            prop_assert!(Offsets::check("offs", &past, total, None, true).is_err());
        }
        prop_assert!(Offsets::draw(pieces, pieces * longest + 1, Some(longest), &mut uniform).is_none());
    }

    /// Rules: any text parses or is refused, and a parsed one holds, or is broken with a
    /// message, with any values; it reads back as it writes.
    #[test]
    fn rules_parse_and_check_or_are_refused(
        holds in "\\PC{0,30}|[a-c0-9+*/%()<>=! -]{0,30}",
        a in any::<u64>(), b in prop_oneof![Just(0u64), any::<u64>()],
    ) {
        if let Ok(rule) = Rule::parse(&holds, "words") {
            let _ = rule.check(&|name| match name { "a" => Some(a), "b" => Some(b), _ => None });
            prop_assert_eq!(Rule::parse(&rule.to_string(), "words").map(|r| r.to_string()), Ok(rule.to_string()));
        }
    }

    #[test]
    fn any_text_parses_or_is_refused(text in "\\PC{0,400}") {
        let _ = Config::parse(Path::new("variants.toml"), &text);
    }

    /// The shipped file with a span replaced by anything: errors, never a panic.
    #[test]
    fn an_edited_variants_file_parses_or_is_refused(at in 0.0f64..1.0, len in 0usize..40, with in "\\PC{0,20}|[0-9\\[\\]\",= ]{0,12}") {
        let text = shipped();
        let start = ((text.len() as f64 * at) as usize).min(text.len());
        let start = (0..=start).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let end = (start + len).min(text.len());
        let end = (end..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
        let edited = format!("{}{}{}", &text[..start], with, &text[end..]);
        let _ = Config::parse(Path::new("variants.toml"), &edited);
    }

    /// Manifests and tuning tables with any JSON are refused by name, never a panic.
    #[test]
    fn any_json_manifest_or_table_is_read_or_refused(text in "\\PC{0,200}", numbers in prop::collection::vec(any::<i64>(), 3)) {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("manifest.json");
        for body in [text.clone(), format!(r#"{{"format": 2, "variants": [{{"name": "x", "ld_multiple": {}}}]}}"#, numbers[0])] {
            std::fs::write(&manifest, &body).unwrap();
            let _ = tilesmith_spec::manifest::read::<tilesmith_spec::Manifest>(&manifest);
            let _ = tilesmith_spec::manifest::read::<tilesmith_spec::Registry>(&manifest);
        }
        let table = dir.path().join("gemm").join("GPU-1sm.json");
        let body = format!(
            r#"{{"format": 1, "family": "gemm", "device": {{"name": "GPU", "capability": [9, 0], "sms": 1}}, "compiler": "", "quantities": ["m", "n", "k"], "entries": [{{"dtype": "bf16", "class": {{"layout": "tn"}}, "problem": [{}, 1, 1], "batch": {}, "baseline_ms": {}, "ranked": []}}]}}"#,
            numbers[0].unsigned_abs(), numbers[1].unsigned_abs(), numbers[2]
        );
        for body in [text, body] {
            let _ = FamilyTable::parse(&body, &table);
        }
    }
}
