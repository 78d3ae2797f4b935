use super::*;
use alloc::format;
use alloc::string::ToString;
use alloc::vec;

const ONE_NODE: Machine = Machine {
    has_1g_pages: true,
    nodes: 1,
};
const TWO_NODES: Machine = Machine {
    has_1g_pages: true,
    nodes: 2,
};

/// The parameters of a command line (other keys skipped).
fn params(cmdline: &str) -> Vec<HugeParam> {
    params_in(cmdline)
}

fn plan_of(cmdline: &str, machine: Machine) -> HugePlan {
    plan(&params(cmdline), machine)
}

/// `(size, pages)` per size, in plan order.
fn counts(p: &HugePlan) -> Vec<(HugePageSize, Pages)> {
    p.sizes.iter().map(|s| (s.size, s.pages.clone())).collect()
}

fn warnings(p: &HugePlan) -> Vec<String> {
    p.warnings.iter().map(ToString::to_string).collect()
}

use HugePageSize::{Gib1, Mib2};

#[test]
fn the_documented_pairs_count_for_their_size() {
    // hugetlbpage.rst: "hugepagesz=2M hugepages=512".
    let p = plan_of("hugepagesz=2M hugepages=512", ONE_NODE);
    assert_eq!(counts(&p), [(Mib2, Pages::Total(512))]);
    assert!(p.sizes[0].is_default && !p.hvo && p.warnings.is_empty());
    // Several pairs, and DPDK's usual 1G default.
    let p = plan_of(
        "hugepagesz=1G hugepages=4 hugepagesz=2M hugepages=1024",
        ONE_NODE,
    );
    assert_eq!(
        counts(&p),
        [(Gib1, Pages::Total(4)), (Mib2, Pages::Total(1024))]
    );
    assert_eq!(p.default_size, Mib2);
    let p = plan_of("default_hugepagesz=1G hugepagesz=1G hugepages=4", ONE_NODE);
    assert_eq!(counts(&p), [(Gib1, Pages::Total(4))]);
    assert!(p.sizes[0].is_default && p.warnings.is_empty());
    // Sizes as memparse reads them.
    for size in ["2M", "2m", "2048K", "0x200000", "2097152", "02M"] {
        let p = plan_of(&format!("hugepagesz={size} hugepages=1"), ONE_NODE);
        assert_eq!(counts(&p), [(Mib2, Pages::Total(1))], "{size}");
    }
}

#[test]
fn the_first_bare_hugepages_is_the_default_sizes() {
    // hugetlbpage.rst: each of these gives 256 2M pages.
    for cmdline in [
        "hugepages=256",
        "default_hugepagesz=2M hugepages=256",
        "hugepages=256 default_hugepagesz=2M",
    ] {
        let p = plan_of(cmdline, ONE_NODE);
        assert_eq!(counts(&p), [(Mib2, Pages::Total(256))], "{cmdline}");
        assert!(p.sizes[0].is_default && p.warnings.is_empty(), "{cmdline}");
    }
    // ... and with default_hugepagesz=1G it is 1G's.
    let p = plan_of("hugepages=3 default_hugepagesz=1G", ONE_NODE);
    assert_eq!(counts(&p), [(Gib1, Pages::Total(3))]);
    assert_eq!(p.default_size, Gib1);
    // hugetlbpage.rst: "hugepages=256 hugepagesz=2M hugepages=512" gives
    // 256 pages and a warning that hugepages=512 is ignored.
    let p = plan_of("hugepages=256 hugepagesz=2M hugepages=512", ONE_NODE);
    assert_eq!(counts(&p), [(Mib2, Pages::Total(256))]);
    assert_eq!(
        warnings(&p),
        [
            "HugeTLB: Ignoring hugepages=512 associated with 2.00 MiB page size",
            "HugeTLB: Using hugepages=256 for number of default huge pages",
        ]
    );
}

#[test]
fn the_node_form_counts_per_node_and_an_invalid_node_is_ignored() {
    // hugetlbpage.rst: one 2M page on node 0, two on node 1.
    let p = plan_of("hugepagesz=2M hugepages=0:1,1:2", TWO_NODES);
    assert_eq!(counts(&p), [(Mib2, Pages::PerNode(vec![(0, 1), (1, 2)]))]);
    assert_eq!(p.sizes[0].pages.total(), 3);
    assert_eq!(
        p.sizes[0].to_string(),
        "HugeTLB: command line asks for 3 pages of 2.00 MiB (node 0: 1, node 1: 2), the default size, vmemmap optimisation (HVO) off"
    );
    // "If the node number is invalid, the parameter will be ignored."
    let p = plan_of("hugepagesz=1G hugepages=0:1,2:2", TWO_NODES);
    assert_eq!(counts(&p), [(Gib1, Pages::Total(0))]);
    assert_eq!(warnings(&p), ["HugeTLB: Invalid hugepages parameter 2:2"]);
    // A bare per-node hugepages= is the default size's, per node.
    let p = plan_of("hugepages=1:5", TWO_NODES);
    assert_eq!(counts(&p), [(Mib2, Pages::PerNode(vec![(1, 5)]))]);
    // A node given twice keeps its last count.
    let p = plan_of("hugepagesz=2M hugepages=0:1,0:4", TWO_NODES);
    assert_eq!(counts(&p), [(Mib2, Pages::PerNode(vec![(0, 4)]))]);
}

#[test]
fn unreadable_counts_are_linuxs_invalid_parameter() {
    for (value, rest) in [
        ("abc", "abc"),
        ("0:x", "x"),
        ("0:1,5", "5"),
        ("-1", "-1"),
        ("99999999999999999999", "99999999999999999999"),
    ] {
        let p = plan_of(&format!("hugepagesz=1G hugepages={value}"), TWO_NODES);
        assert_eq!(counts(&p), [(Gib1, Pages::Total(0))], "{value}");
        assert_eq!(
            warnings(&p),
            [format!("HugeTLB: Invalid hugepages parameter {rest}")],
            "{value}"
        );
    }
    // What Linux does not read after a count is not an error.
    let p = plan_of("hugepagesz=1G hugepages=3x", ONE_NODE);
    assert_eq!(counts(&p), [(Gib1, Pages::Total(3))]);
    // An invalid count leaves the size open for the next one.
    let p = plan_of("hugepagesz=1G hugepages=x hugepages=2", ONE_NODE);
    assert_eq!(counts(&p), [(Gib1, Pages::Total(2))]);
}

#[test]
fn repeated_and_unsupported_sizes_are_ignored_with_linuxs_messages() {
    let p = plan_of(
        "hugepagesz=1G hugepages=2 hugepagesz=1G hugepages=3",
        ONE_NODE,
    );
    assert_eq!(counts(&p), [(Gib1, Pages::Total(2))]);
    assert_eq!(
        warnings(&p),
        [
            "HugeTLB: hugepagesz=1G specified twice, ignoring",
            "HugeTLB: hugepages=3 does not follow a valid hugepagesz, ignoring",
        ]
    );
    let p = plan_of("hugepagesz=4M hugepages=1 hugepagesz=2M", ONE_NODE);
    assert_eq!(counts(&p), [(Mib2, Pages::Total(0))]);
    assert_eq!(
        warnings(&p),
        [
            "HugeTLB: unsupported hugepagesz=4M",
            "HugeTLB: hugepages=1 does not follow a valid hugepagesz, ignoring",
        ]
    );
    let p = plan_of("hugepagesz=2M hugepages=1 hugepages=2", ONE_NODE);
    assert_eq!(counts(&p), [(Mib2, Pages::Total(1))]);
    assert_eq!(
        warnings(&p),
        ["HugeTLB: hugepages= specified twice without interleaving hugepagesz=, ignoring hugepages=2"]
    );
    let p = plan_of(
        "default_hugepagesz=1G default_hugepagesz=2M default_hugepagesz=3G",
        ONE_NODE,
    );
    assert_eq!(p.default_size, Gib1);
    assert_eq!(
        warnings(&p),
        [
            "HugeTLB: default_hugepagesz previously specified, ignoring 2M",
            "HugeTLB: default_hugepagesz previously specified, ignoring 3G",
        ]
    );
    let p = plan_of("default_hugepagesz=4M", ONE_NODE);
    assert_eq!(warnings(&p), ["HugeTLB: unsupported default_hugepagesz=4M"]);
    assert_eq!(p.default_size, Mib2);
    assert!(p.sizes.is_empty());
}

#[test]
fn one_gib_pages_need_the_cpus_pdpe1gb() {
    let no_1g = Machine {
        has_1g_pages: false,
        nodes: 1,
    };
    let p = plan_of("hugepagesz=1G hugepages=2 hugepagesz=2M hugepages=8", no_1g);
    assert_eq!(counts(&p), [(Mib2, Pages::Total(8))]);
    assert_eq!(
        warnings(&p),
        [
            "HugeTLB: unsupported hugepagesz=1G",
            "HugeTLB: hugepages=2 does not follow a valid hugepagesz, ignoring",
        ]
    );
    let p = plan_of("default_hugepagesz=1G", no_1g);
    assert_eq!(warnings(&p), ["HugeTLB: unsupported default_hugepagesz=1G"]);
}

#[test]
fn hvo_is_kstrtobool_and_a_bad_value_is_malformed() {
    let p = plan_of(
        "hugepagesz=1G hugepages=1000 hugetlb_free_vmemmap=on",
        ONE_NODE,
    );
    assert!(p.hvo && p.sizes[0].hvo);
    assert_eq!(
        p.sizes[0].to_string(),
        "HugeTLB: command line asks for 1000 pages of 1.00 GiB, vmemmap optimisation (HVO) on"
    );
    for (value, on) in [("off", false), ("Y", true), ("0", false), ("ON", true)] {
        let p = plan_of(&format!("hugetlb_free_vmemmap={value}"), ONE_NODE);
        assert_eq!((p.hvo, p.warnings.len()), (on, 0), "{value}");
    }
    // The last readable one wins; a bad one is Linux's early-option line
    // and changes nothing; it is read before the other keys, as an early
    // parameter.
    let p = plan_of(
        "hugetlb_free_vmemmap=on hugepagesz=4M hugetlb_free_vmemmap=maybe",
        ONE_NODE,
    );
    assert!(p.hvo);
    assert_eq!(
        warnings(&p),
        [
            "Malformed early option 'hugetlb_free_vmemmap'",
            "HugeTLB: unsupported hugepagesz=4M",
        ]
    );
}

#[test]
fn the_default_size_named_by_default_hugepagesz_may_be_named_again_once() {
    // default_hugepagesz=1G registers 1G; hugepagesz=1G may select it
    // while it has no count yet.
    let p = plan_of(
        "default_hugepagesz=1G hugepages=2 hugepagesz=1G hugepages=3",
        ONE_NODE,
    );
    assert_eq!(counts(&p), [(Gib1, Pages::Total(2))]);
    assert_eq!(
        warnings(&p),
        [
            "HugeTLB: hugepagesz=1G specified twice, ignoring",
            "HugeTLB: hugepages=3 does not follow a valid hugepagesz, ignoring",
        ]
    );
}

// The binding rule against a model written the other way round: for each
// hugepages= token, look back for the size it belongs to.

/// A token of the brute-force alphabet.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok {
    Size(u64),
    Pages,
}

const ALPHABET: [Tok; 4] = [
    Tok::Size(2 << 20),
    Tok::Size(1 << 30),
    Tok::Size(4 << 20),
    Tok::Pages,
];

fn cmdline(toks: &[Tok]) -> String {
    let words: Vec<String> = toks
        .iter()
        .enumerate()
        .map(|(i, t)| match t {
            Tok::Size(b) => format!("hugepagesz={}K", b >> 10),
            // Each count names its position, so the model can tell them apart.
            Tok::Pages => format!("hugepages={}", i + 1),
        })
        .collect();
    words.join(" ")
}

/// What each size gets and how many parameters are ignored, by the rule:
/// a size token is valid if the CPU has it and it was not named before; a
/// hugepages= right after an invalid size token is ignored; any other
/// belongs to the last valid size before it (the default, 2M, if none),
/// and is ignored if the last hugepages= that counted belongs there too.
/// A leading count for 2M wins over a pair for 2M.
fn model(toks: &[Tok], has_1g: bool) -> (Vec<(HugePageSize, Pages)>, usize) {
    let mut sizes: Vec<(HugePageSize, u64)> = Vec::new();
    let mut ignored = 0;
    let mut implicit: Option<u64> = None;
    // The size the last valid size token named (None: the default's).
    let mut current: Option<HugePageSize> = None;
    let mut after_invalid = false;
    let mut last_counted: Option<Option<HugePageSize>> = None;
    for (i, t) in toks.iter().enumerate() {
        match *t {
            Tok::Size(b) => {
                let size = HugePageSize::of_bytes(b, has_1g);
                match size.filter(|s| sizes.iter().all(|(k, _)| k != s)) {
                    Some(s) => {
                        sizes.push((s, 0));
                        current = Some(s);
                        after_invalid = false;
                    }
                    None => {
                        ignored += 1;
                        after_invalid = true;
                    }
                }
            }
            Tok::Pages if after_invalid => {
                ignored += 1;
                after_invalid = false;
            }
            Tok::Pages if last_counted == Some(current) => ignored += 1,
            Tok::Pages => {
                let n = i as u64 + 1;
                match current {
                    None => implicit = Some(n),
                    Some(s) => sizes.iter_mut().find(|(k, _)| *k == s).unwrap().1 = n,
                }
                last_counted = Some(current);
            }
        }
    }
    if let Some(n) = implicit {
        match sizes.iter_mut().find(|(k, _)| *k == HugePageSize::Mib2) {
            Some(two) => {
                // Linux's two lines when the pair had a count.
                ignored += usize::from(two.1 != 0) * 2;
                two.1 = n;
            }
            None => sizes.push((HugePageSize::Mib2, n)),
        }
    }
    let counts = sizes
        .into_iter()
        .map(|(s, n)| (s, Pages::Total(n)))
        .collect();
    (counts, ignored)
}

#[test]
fn every_short_command_line_binds_as_the_model_says() {
    let mut lines = vec![Vec::new()];
    for len in 1..=6 {
        let longer: Vec<Vec<Tok>> = lines
            .iter()
            .filter(|l: &&Vec<Tok>| l.len() == len - 1)
            .flat_map(|l| {
                ALPHABET.iter().map(move |t| {
                    let mut l = l.clone();
                    l.push(*t);
                    l
                })
            })
            .collect();
        lines.extend(longer);
    }
    assert_eq!(lines.len(), (0..=6).map(|n| 4usize.pow(n)).sum::<usize>());
    for toks in &lines {
        for has_1g in [true, false] {
            let machine = Machine {
                has_1g_pages: has_1g,
                nodes: 1,
            };
            let p = plan_of(&cmdline(toks), machine);
            let got = (counts(&p), p.warnings.len());
            assert_eq!(got, model(toks, has_1g), "{} (1G: {has_1g})", cmdline(toks));
        }
    }
}
