//! `build --timings`: where a build's compile time goes, per variant and per family, from
//! nvcc's own account of its phases (`--time`) and the size of each fatbin, as cargo's
//! `--timings` says it of crates: so that the cost of a variant is seen before it is paid.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One variant's compile: nvcc's phases summed into what they are, in seconds elapsed (nvcc
/// times its phases by the clock: with more jobs than cores they include the waits).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Timing {
    pub variant: String,
    pub family: String,
    /// Preprocessing, cudafe++ and cicc: C++ to PTX, once per virtual architecture.
    pub front_end_s: f64,
    /// PTX to SASS, once per real architecture.
    pub ptxas_s: f64,
    pub fatbinary_s: f64,
    /// The driver and any other phase.
    pub other_s: f64,
    /// The nvcc process, start to end (its phases run one after another).
    pub wall_s: f64,
    pub fatbin_bytes: u64,
}

impl Timing {
    /// The seconds of nvcc's phases together.
    pub fn phases_s(&self) -> f64 {
        self.front_end_s + self.ptxas_s + self.fatbinary_s + self.other_s
    }
}

/// nvcc's `--time` table (comma-separated, a header and a row per phase run: file, phase,
/// inputs, output, arch, tool, value, unit) into [front end, ptxas, fatbinary, other] seconds;
/// none where no row reads.
pub fn parse(csv: &str) -> Option<[f64; 4]> {
    let mut seconds = [0.0; 4];
    let mut rows = 0;
    for line in csv.lines() {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let [.., value, unit] = fields[..] else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let scale = match unit {
            "ms" => 1e-3,
            "s" => 1.0,
            "us" => 1e-6,
            _ => continue,
        };
        let phase = fields.get(1).copied().unwrap_or_default();
        let at = if phase.starts_with("gcc (preprocessing") || phase.starts_with("cudafe") || phase == "cicc" {
            0
        } else if phase == "ptxas" {
            1
        } else if phase == "fatbinary" {
            2
        } else {
            3
        };
        seconds[at] += value * scale;
        rows += 1;
    }
    (rows > 0).then_some(seconds)
}

/// The CPU seconds this process's finished child processes have used so far (user and
/// system): the difference over a build is its compiles' core-seconds.
pub fn children_cpu_s() -> f64 {
    // SAFETY: getrusage writes the struct it is given, which lives for the call.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) != 0 {
            return 0.0;
        }
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The report: a line for the build (with `cpu_s`, the core-seconds its processes used), a
/// row per family (most seconds first) and the slowest variants; written as JSON to `file`
/// with every variant's timing.
pub fn report(timings: &[Timing], cpu_s: f64, file: &Path) -> Result<String, String> {
    let total: f64 = timings.iter().map(Timing::phases_s).sum();
    let share = |part: f64, of: f64| if of > 0.0 { 100.0 * part / of } else { 0.0 };
    let sum = |f: fn(&Timing) -> f64, of: &[&Timing]| of.iter().map(|t| f(t)).sum::<f64>();
    let mut families: BTreeMap<&str, Vec<&Timing>> = BTreeMap::new();
    for timing in timings {
        families.entry(timing.family.as_str()).or_default().push(timing);
    }
    let all: Vec<&Timing> = timings.iter().collect();
    let count = timings.len().max(1) as f64;
    let mut out = format!(
        "build timings: {} variant(s) compiled, {cpu_s:.1} core-s of CPU ({:.2} a variant, nvcc and its checks); nvcc's phases, {total:.1} s elapsed ({:.2} a variant): front end {:.0}%, ptxas {:.0}%, fatbinary {:.0}%, other {:.0}%; {:.1} MB of fatbins\n",
        timings.len(),
        cpu_s / count,
        total / count,
        share(sum(|t| t.front_end_s, &all), total),
        share(sum(|t| t.ptxas_s, &all), total),
        share(sum(|t| t.fatbinary_s, &all), total),
        share(sum(|t| t.other_s, &all), total),
        timings.iter().map(|t| t.fatbin_bytes).sum::<u64>() as f64 / 1e6,
    );
    out += "| family | variants | nvcc s | a variant | front end | ptxas | fatbinary | fatbin MB |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n";
    let mut rows: Vec<(&str, &Vec<&Timing>, f64)> = families.iter().map(|(f, ts)| (*f, ts, sum(Timing::phases_s, ts))).collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(b.0)));
    for (family, ts, seconds) in rows {
        out += &format!(
            "| {family} | {} | {seconds:.1} | {:.2} | {:.0}% | {:.0}% | {:.0}% | {:.1} |\n",
            ts.len(),
            seconds / ts.len() as f64,
            share(sum(|t| t.front_end_s, ts), seconds),
            share(sum(|t| t.ptxas_s, ts), seconds),
            share(sum(|t| t.fatbinary_s, ts), seconds),
            ts.iter().map(|t| t.fatbin_bytes).sum::<u64>() as f64 / 1e6,
        );
    }
    let mut slowest = all;
    slowest.sort_by(|a, b| b.phases_s().total_cmp(&a.phases_s()).then(a.variant.cmp(&b.variant)));
    let named: Vec<String> = slowest.iter().take(5).map(|t| format!("{} {:.1} s", t.variant, t.phases_s())).collect();
    out += &format!("slowest: {}\n", named.join(", "));
    let json = serde_json::to_string_pretty(timings).map_err(|e| e.to_string())? + "\n";
    if let Some(folder) = file.parent() {
        std::fs::create_dir_all(folder).map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    }
    let temporary = file.with_extension("json.tmp");
    std::fs::write(&temporary, json)
        .and_then(|()| std::fs::rename(&temporary, file))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    out += &format!("every variant's timing: {}\n", file.display());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nvcc 13.0's table for a variant of two architectures.
    const TABLE: &str = "source file name , phase name , phase input files , phase output file , arch , tool, metric , unit
k.cu , gcc (preprocessing 1) , k.cu  , /tmp/x.cpp1.ii , compute_90 , nvcc , 210.4020 , ms
k.cu , cicc , /tmp/x.cpp1.ii  , /tmp/x.ptx , compute_90 , nvcc , 617.1820 , ms
k.cu , ptxas , /tmp/x.ptx  , /tmp/x.sm_90.cubin , sm_90 , nvcc , 208.2720 , ms
k.cu , fatbinary , /tmp/x.ptx /tmp/x.sm_90.cubin  , k.fatbin ,  , nvcc , 8.9470 , ms
 , nvcc (driver) ,  , k.fatbin ,  , nvcc , 0.3831 , ms
";

    #[test]
    fn phases_sum_into_what_they_are() {
        let [front, ptxas, fatbinary, other] = parse(TABLE).unwrap();
        assert!((front - 0.8275840).abs() < 1e-9, "{front}");
        assert!((ptxas - 0.208272).abs() < 1e-9 && (fatbinary - 0.008947).abs() < 1e-9 && (other - 0.0003831).abs() < 1e-9);
        assert_eq!(parse("source file name , phase name\nnot, a, row\n"), None);
    }

    #[test]
    fn children_cpu_grows_with_a_child() {
        let before = children_cpu_s();
        let spun = std::process::Command::new("sh").arg("-c").arg("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done").status();
        assert!(spun.unwrap().success());
        assert!(children_cpu_s() > before, "{before}");
    }

    #[test]
    fn the_report_splits_by_family_and_writes_every_variant() {
        let dir = tempfile::tempdir().unwrap();
        let timing = |variant: &str, family: &str, front_end_s| Timing {
            variant: variant.into(),
            family: family.into(),
            front_end_s,
            ptxas_s: 1.0,
            fatbin_bytes: 2_000_000,
            ..Timing::default()
        };
        let timings = [timing("rope_a", "rope", 3.0), timing("rope_b", "rope", 1.0), timing("softmax", "softmax", 1.0)];
        let file = dir.path().join("t/build-timings.json");
        let text = report(&timings, 6.0, &file).unwrap();
        assert!(
            text.starts_with("build timings: 3 variant(s) compiled, 6.0 core-s of CPU (2.00 a variant, nvcc and its checks); nvcc's phases, 8.0 s elapsed (2.67 a variant): front end 62%, ptxas 38%"),
            "{text}"
        );
        assert!(text.contains("| rope | 2 | 6.0 | 3.00 | 67% | 33% | 0% | 4.0 |"), "{text}");
        assert!(text.contains("slowest: rope_a 4.0 s, rope_b 2.0 s, softmax 2.0 s"), "{text}");
        let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(written.as_array().map(Vec::len), Some(3));
    }
}
