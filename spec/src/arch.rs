//! GPU architectures a backend may target, and what each allows.

/// Largest dynamic shared memory one block may opt into, in bytes, per SASS target.
const SMEM_OPT_IN_LIMIT: &[(&str, u32)] = &[
    ("sm_80", 166_912),
    ("sm_86", 101_376),
    ("sm_89", 101_376),
    ("sm_90", 232_448),
    ("sm_90a", 232_448),
    ("sm_100", 232_448),
    ("sm_100a", 232_448),
    ("sm_120", 101_376),
];

/// Every SASS target tilesmith knows, for error messages.
pub fn known_sass() -> impl Iterator<Item = &'static str> {
    SMEM_OPT_IN_LIMIT.iter().map(|(arch, _)| *arch)
}

/// The dynamic shared-memory limit of a SASS target (`sm_80`), if tilesmith knows it.
pub fn smem_limit(sass: &str) -> Option<u32> {
    SMEM_OPT_IN_LIMIT.iter().find(|(arch, _)| *arch == sass).map(|(_, limit)| *limit)
}

/// Whether `ptx` names a virtual architecture (`compute_80`) matching a known SASS target.
pub fn is_known_ptx(ptx: &str) -> bool {
    ptx.strip_prefix("compute_").is_some_and(|version| smem_limit(&format!("sm_{version}")).is_some())
}

/// The compute capability a SASS or PTX target needs, as (major, minor): `sm_90a` gives (9, 0).
pub fn compute_capability(target: &str) -> Option<(u32, u32)> {
    let digits = target.strip_prefix("sm_").or_else(|| target.strip_prefix("compute_"))?.trim_end_matches('a');
    let number: u32 = digits.parse().ok()?;
    Some((number / 10, number % 10))
}

/// Checks a list of GPUs to build for (`--arch`, `[build] arch`): each a SASS target
/// tilesmith knows, at least one.
pub fn check_list(list: &[String]) -> Result<(), String> {
    let known: Vec<&str> = known_sass().collect();
    if list.is_empty() {
        return Err(format!("names no architecture: give one or more of {}", known.join(", ")));
    }
    match list.iter().find(|a| !known.contains(&a.as_str())) {
        Some(bad) => Err(format!("{bad}: not an architecture tilesmith knows ({})", known.join(", "))),
        None => Ok(()),
    }
}

/// `targets` for the GPUs of `list` (checked by [`check_list`]; `sm_90` names `sm_90a` too):
/// the SASS targets among them, the PTX raised to the lowest kept where it was older (one
/// front end fewer). None where the targets name none of them.
pub fn narrowed(targets: &crate::manifest::Targets, list: &[String]) -> Option<crate::manifest::Targets> {
    let wanted = |sass: &String| list.iter().any(|a| sass == a || sass.strip_suffix('a') == Some(a.as_str()));
    let sass: Vec<String> = targets.sass.iter().filter(|s| wanted(s)).cloned().collect();
    let lowest = sass.iter().min_by_key(|s| compute_capability(s))?;
    let ptx = if compute_capability(&targets.ptx) < compute_capability(lowest) {
        lowest.replacen("sm_", "compute_", 1)
    } else {
        targets.ptx.clone()
    };
    Some(crate::manifest::Targets { sass, ptx })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_capabilities() {
        assert_eq!(compute_capability("sm_90a"), Some((9, 0)));
        assert_eq!(compute_capability("compute_80"), Some((8, 0)));
        assert_eq!(compute_capability("sm_120"), Some((12, 0)));
        assert_eq!(compute_capability("gfx90"), None);
    }

    #[test]
    fn knows_limits() {
        assert_eq!(smem_limit("sm_90"), Some(232_448));
        assert_eq!(smem_limit("sm_42"), None);
        assert!(is_known_ptx("compute_80"));
        assert!(!is_known_ptx("compute_42"));
        assert!(!is_known_ptx("sm_80"));
    }

    #[test]
    fn checks_lists() {
        let list = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        assert!(check_list(&list(&["sm_90", "sm_80"])).is_ok());
        assert!(check_list(&list(&["sm_91"])).unwrap_err().starts_with("sm_91: not an architecture tilesmith knows (sm_80"));
        assert!(check_list(&[]).unwrap_err().starts_with("names no architecture"));
    }
}
