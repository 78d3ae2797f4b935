//! Each seed's counted figure, beside its times: guest instructions from
//! the run's counted boots (`SIZE-ENTRY-counted-K.profile.json`,
//! [`crate::counted::seed_counts`]), the same on any host. Each cell lists
//! every counted boot (`a / b`) and the pathology over the fix from their
//! means.

use std::path::Path;

use crate::counted::{seed_counts, SeedCounts};

/// What a cell says when the run counted no boot of an entry.
pub const NOT_COUNTED: &str =
    "– (no counted boots in this run: tests/seeds.sh counts each entry under the profile)";

/// The counted boots of `entry` in the run whose logs are `logs`, at its
/// one size; `None` when it counted none.
fn boots(logs: &Path, size: &str, entry: &str) -> Result<Option<Vec<SeedCounts>>, String> {
    let b = seed_counts(logs, size, entry)?;
    Ok((!b.is_empty()).then_some(b))
}

/// `a / b` of each boot's figure, and their mean.
fn each(
    boots: &[SeedCounts],
    f: impl Fn(&SeedCounts) -> Option<f64>,
) -> Result<(String, f64), String> {
    let v: Vec<f64> = boots
        .iter()
        .map(|b| f(b).ok_or("a counted boot lacks the phase"))
        .collect::<Result<_, _>>()?;
    let text: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
    Ok((text.join(" / "), v.iter().sum::<f64>() / v.len() as f64))
}

fn over(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}×", a / b)
    } else {
        "–".into()
    }
}

fn phase(name: &'static str) -> impl Fn(&SeedCounts) -> Option<f64> {
    move |b| b.phase(name).map(|i| i as f64)
}

/// Seed 1: the boot CPU's struct-page instructions, `regions` (every page)
/// against `deferred` (the low zones and a section per node).
pub fn vmware(logs: &Path, size: &str) -> Result<String, String> {
    let (Some(bad), Some(good)) = (
        boots(logs, size, "regions")?,
        boots(logs, size, "deferred")?,
    ) else {
        return Ok(NOT_COUNTED.into());
    };
    let (bad_text, bad_mean) = each(&bad, phase("boot_cpu_memmap"))?;
    let (good_text, good_mean) = each(&good, phase("boot_cpu_memmap"))?;
    Ok(format!(
        "boot-CPU memmap instructions: `regions` {bad_text}, `deferred` {good_text}: {}",
        over(bad_mean, good_mean)
    ))
}

/// Seed 2: what one CPU runs in `regions` (every node's struct pages,
/// serially) against what a machine with a core per worker waits for in
/// `deferred`: its boot CPU's share, then the critical path (the largest
/// node's deferred init per worker); and `deferred`'s nodes summed.
pub fn power(logs: &Path, size: &str) -> Result<String, String> {
    let (Some(bad), Some(good)) = (
        boots(logs, size, "regions")?,
        boots(logs, size, "deferred")?,
    ) else {
        return Ok(NOT_COUNTED.into());
    };
    let (serial_text, serial) = each(&bad, phase("boot_cpu_memmap"))?;
    let (sum_text, _) = each(&good, |b| {
        (!b.node_insns.is_empty()).then(|| b.node_insns.iter().sum::<u64>() as f64)
    })?;
    let (path_text, path) = each(&good, |b| {
        Some(b.phase("boot_cpu_memmap")? as f64 + b.critical_path_insns?)
    })?;
    Ok(format!(
        "instructions: `regions`' boot CPU {serial_text} (every node, serially); `deferred`'s nodes summed {sum_text}, its boot CPU plus the critical path (largest node per worker) {path_text}: {}",
        over(serial, path)
    ))
}

/// Seed 3: `perpfn`'s boot-CPU instructions per struct page against
/// `regions`' on the sparse map.
pub fn sparse(logs: &Path, size: &str) -> Result<String, String> {
    let (Some(bad), Some(good)) = (boots(logs, size, "perpfn")?, boots(logs, size, "regions")?)
    else {
        return Ok(NOT_COUNTED.into());
    };
    let (bad_text, bad_mean) = each(&bad, phase("boot_cpu_memmap"))?;
    let (good_text, good_mean) = each(&good, phase("boot_cpu_memmap"))?;
    Ok(format!(
        "boot-CPU memmap instructions: `perpfn` {bad_text}, `regions` {good_text}: {}",
        over(bad_mean, good_mean)
    ))
}

/// Seed 4: memory-block creation's instructions, 128 MiB blocks by linear
/// search against the index and against 2 GiB blocks.
pub fn blocks(
    logs: &Path,
    size: &str,
    entry: impl Fn(&str, &str) -> Option<String>,
) -> Result<String, String> {
    let mut found = Vec::new();
    for (bytes, lookup) in [("128M", "linear"), ("128M", "indexed"), ("2G", "linear")] {
        let e = entry(bytes, lookup)
            .ok_or(format!("no entry with {bytes} blocks and {lookup} lookup"))?;
        match boots(logs, size, &e)? {
            Some(b) => found.push(each(&b, phase("memory_blocks"))?),
            None => return Ok(NOT_COUNTED.into()),
        }
    }
    let [(linear, l), (indexed, i), (big, g)] = <[_; 3]>::try_from(found).expect("three entries");
    Ok(format!(
        "memory-block creation instructions: 128 MiB `linear` {linear}, `indexed` {indexed}, 2 GiB `linear` {big}: {} (index), {} (2 GiB blocks)",
        over(l, i),
        over(l, g)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile as memboot-profile writes it, with the fields read here.
    fn profile(boot_cpu: u64, blocks: u64, nodes: &[u64], critical: f64) -> String {
        let nodes: Vec<String> = nodes
            .iter()
            .map(|n| format!("{{\"insns\":{n},\"workers\":1}}"))
            .collect();
        format!(
            "{{\"phases\":[{{\"name\":\"boot_cpu_memmap\",\"opens\":1,\"insns\":{boot_cpu}}},{{\"name\":\"memory_blocks\",\"opens\":1,\"insns\":{blocks}}},{{\"name\":\"deferred\",\"opens\":0,\"insns\":0}}],\"deferred_nodes\":{{\"nodes\":[{}],\"critical_path_insns\":{critical}}}}}",
            nodes.join(",")
        )
    }

    fn dir(name: &str, files: &[(&str, String)]) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("seeds-counted-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        for (name, text) in files {
            std::fs::write(d.join(name), text).unwrap();
        }
        d
    }

    #[test]
    fn each_seed_compares_its_counted_boots() {
        let d = dir(
            "rows",
            &[
                (
                    "1T-regions-counted-1.profile.json",
                    profile(3000, 0, &[], 0.0),
                ),
                (
                    "1T-regions-counted-2.profile.json",
                    profile(3000, 0, &[], 0.0),
                ),
                (
                    "1T-deferred-counted-1.profile.json",
                    profile(100, 0, &[1000, 1200], 200.0),
                ),
                (
                    "1T-deferred-counted-2.profile.json",
                    profile(100, 0, &[1000, 1200], 200.0),
                ),
            ],
        );
        assert_eq!(
            vmware(&d, "1T").unwrap(),
            "boot-CPU memmap instructions: `regions` 3000 / 3000, `deferred` 100 / 100: 30.0×"
        );
        // Serial 3000 against 100 + 200 on the critical path; nodes summed 2200.
        let p = power(&d, "1T").unwrap();
        assert!(p.contains("nodes summed 2200 / 2200"), "{p}");
        assert!(p.ends_with("300 / 300: 10.0×"), "{p}");
        assert_eq!(sparse(&d, "1T").unwrap(), NOT_COUNTED);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn block_creation_by_lookup() {
        let e = |s: &str, l: &str| {
            Some(format!(
                "ondemand+memory_block_size={s}+memory_block_lookup={l}"
            ))
        };
        let name = |s: &str, l: &str| format!("2T-{}-counted-1.profile.json", e(s, l).unwrap());
        let d = dir(
            "blocks",
            &[
                (&name("128M", "linear"), profile(0, 6000, &[], 0.0)),
                (&name("128M", "indexed"), profile(0, 60, &[], 0.0)),
                (&name("2G", "linear"), profile(0, 300, &[], 0.0)),
            ],
        );
        let cell = blocks(&d, "2T", e).unwrap();
        assert!(
            cell.ends_with(": 100.0× (index), 20.0× (2 GiB blocks)"),
            "{cell}"
        );
        std::fs::remove_dir_all(d).unwrap();
    }
}
