use super::*;

#[test]
fn console_is_buffered_or_direct() {
    assert_eq!(parse("").unwrap().console, Console::Buffered);
    assert_eq!(parse("console=direct").unwrap().console, Console::Direct);
    assert_eq!(
        parse("console=buffered").unwrap().console,
        Console::Buffered
    );
    assert!(matches!(
        parse("console=ttyS0"),
        Err(OptionError::BadValue { key: "console", .. })
    ));
}

#[test]
fn buddy_store_defaults_by_layout_and_refuses_lists_without_links() {
    assert_eq!(parse("").unwrap().buddy_store(), BuddyStore::Lists);
    assert_eq!(
        parse("struct_page=8").unwrap().buddy_store(),
        BuddyStore::Bitmaps
    );
    assert_eq!(
        parse("struct_page=32 buddy=bitmaps").unwrap().buddy_store(),
        BuddyStore::Bitmaps
    );
    let e = parse("buddy=lists struct_page=8").unwrap_err();
    assert!(
        matches!(
            e,
            OptionError::Conflict {
                option: "buddy=lists",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("use buddy=bitmaps"), "{e}");
    assert!(matches!(
        parse("memmap=touch verify=off alloc_test=0 buddy=bitmaps"),
        Err(OptionError::Conflict {
            option: "buddy=bitmaps",
            ..
        })
    ));
    assert!(matches!(
        parse("buddy=trees"),
        Err(OptionError::BadValue { key: "buddy", .. })
    ));
}

#[test]
fn struct_page_takes_64_or_32_bytes() {
    assert_eq!(parse("").unwrap().struct_page, StructPageSize::Bytes64);
    assert_eq!(
        parse("struct_page=32").unwrap().struct_page,
        StructPageSize::Bytes32
    );
    assert_eq!(
        parse("struct_page=64").unwrap().struct_page,
        StructPageSize::Bytes64
    );
    for bad in [
        "struct_page=16",
        "struct_page=32B",
        "struct_page=",
        "struct_page=0x20",
    ] {
        let err = parse(bad).unwrap_err().to_string();
        assert!(err.contains("64|32|8"), "{bad}: {err}");
    }
}

#[test]
fn parses_tsc_khz_and_refuses_what_no_tsc_ticks_at() {
    assert_eq!(parse("tsc_khz=2600000").unwrap().tsc_khz, Some(2_600_000));
    assert_eq!(parse("").unwrap().tsc_khz, None);
    for bad in [
        "tsc_khz=999",
        "tsc_khz=100000001",
        "tsc_khz=2.6G",
        "tsc_khz=",
        "tsc_khz=-1",
    ] {
        let e = parse(bad).unwrap_err();
        assert!(
            matches!(e, OptionError::BadValue { key: "tsc_khz", .. }),
            "{bad}: {e}"
        );
        assert!(e.to_string().contains("kHz"), "{e}");
    }
    assert_eq!(
        parse("tsc_khz=2600000 tsc_khz=2600000"),
        Err(OptionError::Repeated { key: "tsc_khz" })
    );
}

/// The error messages' key list names exactly the keys with a parser.
#[test]
fn known_keys_are_the_keys_with_a_parser() {
    let mut known: Vec<&str> = KNOWN_KEYS.split(", ").collect();
    let mut parsed: Vec<&str> = SETTERS.iter().map(|(key, _)| *key).collect();
    parsed.extend(HugeKey::ALL.map(HugeKey::name));
    known.sort_unstable();
    parsed.sort_unstable();
    assert_eq!(known, parsed);
}

#[test]
fn empty_is_default() {
    assert_eq!(parse("").unwrap(), Options::default());
    assert_eq!(parse("  \n ").unwrap(), Options::default());
}

#[test]
fn parses_test_fault() {
    assert_eq!(
        parse("test_fault=page_fault").unwrap().test_fault,
        TestFault::PageFault
    );
    assert_eq!(
        parse(" test_fault=panic ").unwrap().test_fault,
        TestFault::Panic
    );
}

#[test]
fn parses_test_fault_panic_in_log() {
    assert_eq!(
        parse("test_fault=panic_in_log").unwrap().test_fault,
        TestFault::PanicInLog
    );
    assert_eq!(
        parse("verify=off test_fault=panic_in_log memmap=ondemand")
            .unwrap()
            .test_fault,
        TestFault::PanicInLog
    );
    // Exact value only, and the error lists it among the choices.
    let err = parse("test_fault=panic_in").unwrap_err();
    let msg = alloc::format!("{err}");
    assert!(msg.contains("|panic_in_log|"), "{msg}");
}

#[test]
fn parses_test_fault_panic_in_summary() {
    assert_eq!(
        parse("test_fault=panic_in_summary").unwrap().test_fault,
        TestFault::PanicInSummary
    );
    let err = parse("test_fault=panic_in_sum").unwrap_err();
    let msg = alloc::format!("{err}");
    assert!(msg.contains("|panic_in_summary|"), "{msg}");
}

#[test]
fn refuses_bad_input() {
    assert_eq!(
        parse("bogus=1"),
        Err(OptionError::UnknownKey { key: "bogus" })
    );
    assert_eq!(
        parse("test_fault"),
        Err(OptionError::Malformed {
            token: "test_fault"
        })
    );
    assert!(matches!(
        parse("test_fault=sometimes"),
        Err(OptionError::BadValue { .. })
    ));
    assert_eq!(
        parse("test_fault=none test_fault=panic"),
        Err(OptionError::Repeated { key: "test_fault" })
    );
    let msg = alloc::format!("{}", parse("x=1").unwrap_err());
    assert!(
        msg.contains("unknown option 'x'") && msg.contains("test_fault"),
        "{msg}"
    );
}

#[test]
fn parses_memmap_options() {
    let o = parse("memmap=regions memory_block_size=2G verify=off").unwrap();
    assert_eq!(o.memmap, MemmapMode::Regions);
    assert_eq!(o.memory_block_size, BlockSizeOption::Bytes(2 << 30));
    assert_eq!(o.verify, Verify::Off);
    assert_eq!(
        parse("threads_per_node=1").unwrap().threads_per_node,
        Some(1)
    );
    assert_eq!(parse("memmap=touch").unwrap().memmap, MemmapMode::Touch);
    assert_eq!(parse("memmap=perpfn").unwrap().memmap, MemmapMode::PerPfn);
    assert_eq!(
        parse("memory_block_size=128M").unwrap().memory_block_size,
        BlockSizeOption::Bytes(128 << 20)
    );
    assert_eq!(parse("").unwrap().memmap, MemmapMode::Deferred);
}

#[test]
fn parses_ondemand_options() {
    let o = parse("memmap=ondemand ondemand_drain=on alloc_test=64M").unwrap();
    assert_eq!(o.memmap, MemmapMode::OnDemand);
    assert_eq!(o.ondemand_drain, Drain::On);
    assert_eq!(o.alloc_test_bytes, 64 << 20);
    let d = parse("").unwrap();
    assert_eq!(
        (d.ondemand_drain, d.alloc_test_bytes),
        (Drain::Off, 1 << 30)
    );
    assert_eq!(parse("alloc_test=0").unwrap().alloc_test_bytes, 0);
    assert_eq!(parse("alloc_test=1T").unwrap().alloc_test_bytes, 1 << 40);
    for bad in [
        "alloc_test=1000K",
        "alloc_test=8M",
        "alloc_test=x",
        "ondemand_drain=yes",
    ] {
        assert!(
            matches!(parse(bad), Err(OptionError::BadValue { .. })),
            "{bad}"
        );
    }
    // Every mode's name parses back to it.
    for m in MemmapMode::ALL {
        assert_eq!(
            parse(&alloc::format!("memmap={}", m.name()))
                .unwrap()
                .memmap,
            m
        );
    }
}

#[test]
fn parses_memory_block_lookup() {
    assert_eq!(parse("").unwrap().memory_block_lookup, BlockLookup::Indexed);
    assert_eq!(
        parse("memory_block_lookup=linear memory_block_size=128M")
            .unwrap()
            .memory_block_lookup,
        BlockLookup::Linear
    );
    assert_eq!(
        parse("memmap=ondemand memory_block_lookup=indexed")
            .unwrap()
            .memory_block_lookup,
        BlockLookup::Indexed
    );
    for bad in [
        "memory_block_lookup=",
        "memory_block_lookup=Linear",
        "memory_block_lookup=xarray",
        "memory_block_lookup=linear,indexed",
    ] {
        let e = parse(bad).unwrap_err();
        assert!(
            matches!(
                e,
                OptionError::BadValue {
                    key: "memory_block_lookup",
                    ..
                }
            ),
            "{bad}: {e:?}"
        );
        assert!(
            alloc::format!("{e}").ends_with("expected indexed|linear"),
            "{e}"
        );
    }
    assert_eq!(
        parse("memory_block_lookup=linear memory_block_lookup=linear"),
        Err(OptionError::Repeated {
            key: "memory_block_lookup"
        })
    );
    let msg = alloc::format!("{}", parse("memory_block=linear").unwrap_err());
    assert!(msg.contains("memory_block_lookup"), "{msg}");
}

#[test]
fn refuses_bad_memmap_options() {
    for bad in [
        "memmap=fast",
        "threads_per_node=0",
        "threads_per_node=x",
        "threads_per_node=256",
        "memory_block_size=64M",
        "memory_block_size=3G",
        "memory_block_size=192M",
        "memory_block_size=2T",
        "verify=maybe",
    ] {
        assert!(
            matches!(parse(bad), Err(OptionError::BadValue { .. })),
            "{bad}"
        );
    }
    assert_eq!(
        parse("verify=off verify=full"),
        Err(OptionError::Repeated { key: "verify" })
    );
}

#[test]
fn linux_memmap_forms_repeat_beside_one_mode() {
    let o = parse("memmap=exactmap memmap=perpfn memmap=640K@0,1G@1M memmap=2M$0x100000").unwrap();
    assert_eq!(o.memmap, MemmapMode::PerPfn);
    let want = [
        Form::ExactMap,
        Form::Add {
            start: 0,
            size: 640 << 10,
            kind: 1,
        },
        Form::Add {
            start: 1 << 20,
            size: 1 << 30,
            kind: 1,
        },
        Form::Add {
            start: 1 << 20,
            size: 2 << 20,
            kind: 2,
        },
    ];
    assert_eq!(o.user_map, want);
    assert_eq!(parse("").unwrap().user_map, []);
    assert_eq!(
        parse("memmap=regions memmap=2G memmap=perpfn"),
        Err(OptionError::Repeated { key: "memmap" })
    );
    let err = parse("memmap=2G!4G").unwrap_err();
    assert!(matches!(
        err,
        OptionError::MemmapForm {
            token: "memmap=2G!4G",
            ..
        }
    ));
    assert!(err.to_string().contains("persistent memory"), "{err}");
    let err = parse("memmap=1G@1G,010M").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("option memmap=1G@1G,010M: a number starts with 0"),
        "{err}"
    );
    let many = "memmap=4K@0 ".repeat(MAX_FORMS + 1);
    assert_eq!(
        parse(&many),
        Err(OptionError::TooManyForms {
            forms: MAX_FORMS + 1
        })
    );
    // A mode misspelt is not a Linux form: the mode's error says both.
    let err = parse("memmap=perfpn").unwrap_err().to_string();
    assert!(
        err.contains("deferred|regions") && err.contains("exactmap"),
        "{err}"
    );
}

/// `parse(cmdline)` refuses `option` for conflicting with `other`
/// (given or default), and its message names both.
fn assert_conflict(cmdline: &str, option: &str, other: &str) {
    let err = parse(cmdline).expect_err(cmdline);
    assert!(
        matches!(err, OptionError::Conflict { option: o, .. } if o == option),
        "{cmdline}: {err:?}"
    );
    let msg = alloc::format!("{err}");
    assert!(
        msg.starts_with(&alloc::format!(
            "option {option} does nothing with {other}: "
        )),
        "{cmdline}: {msg}"
    );
}

/// Every combination the README lists as refused, `test_fault=` aside:
/// the message names the option and the setting it conflicts with.
#[test]
fn refuses_options_that_would_do_nothing() {
    for (cmdline, option, other) in [
        (
            "ondemand_drain=on",
            "ondemand_drain=on",
            "memmap=deferred (the default)",
        ),
        (
            "memmap=touch ondemand_drain=on",
            "ondemand_drain=on",
            "memmap=touch",
        ),
        (
            "memmap=regions threads_per_node=2",
            "threads_per_node=2",
            "memmap=regions",
        ),
        (
            "threads_per_node=1 memmap=perpfn",
            "threads_per_node=1",
            "memmap=perpfn",
        ),
        (
            "memmap=ondemand threads_per_node=1",
            "threads_per_node=1",
            "ondemand_drain=off (the default)",
        ),
        (
            "memmap=touch alloc_test=64M",
            "alloc_test=64M",
            "memmap=touch",
        ),
        ("memmap=touch verify=full", "verify=full", "memmap=touch"),
    ] {
        assert_conflict(cmdline, option, other);
    }
}

/// The README's refused `test_fault=` combinations: a fault that
/// damages state needs verification and something of its kind to damage.
#[test]
fn refuses_test_faults_that_would_damage_nothing() {
    for (cmdline, option, other) in [
        (
            "test_fault=corrupt_page verify=off",
            "test_fault=corrupt_page",
            "verify=off",
        ),
        (
            "test_fault=double_init verify=off",
            "test_fault=double_init",
            "verify=off",
        ),
        (
            "memmap=touch test_fault=list_corrupt",
            "test_fault=list_corrupt",
            "memmap=touch",
        ),
        (
            "test_fault=pool_overlap",
            "test_fault=pool_overlap",
            "memmap=deferred (the default)",
        ),
        (
            "memmap=ondemand ondemand_drain=on test_fault=pool_overlap",
            "test_fault=pool_overlap",
            "ondemand_drain=on",
        ),
        (
            "memmap=regions test_fault=double_init",
            "test_fault=double_init",
            "memmap=regions",
        ),
        (
            "memmap=ondemand alloc_test=0 test_fault=corrupt_page",
            "test_fault=corrupt_page",
            "alloc_test=0",
        ),
        (
            "memmap=ondemand alloc_test=0 test_fault=double_init",
            "test_fault=double_init",
            "alloc_test=0",
        ),
        (
            "memmap=perpfn test_fault=pool_overlap",
            "test_fault=pool_overlap",
            "memmap=perpfn",
        ),
    ] {
        assert_conflict(cmdline, option, other);
    }
}

/// The same options where they do act are accepted, and defaults never
/// conflict (touch keeps its default alloc_test and verify).
#[test]
fn accepts_the_combinations_that_act() {
    for ok in [
        "memmap=touch",
        "memmap=touch alloc_test=0 verify=off threads_per_node=1",
        "memmap=ondemand ondemand_drain=on threads_per_node=1",
        "memmap=ondemand ondemand_drain=off",
        "memmap=deferred threads_per_node=1",
        "memmap=touch threads_per_node=2",
        "test_fault=corrupt_page",
        "memmap=regions test_fault=corrupt_page",
        "memmap=perpfn test_fault=list_corrupt",
        "memmap=ondemand test_fault=corrupt_page",
        "memmap=ondemand test_fault=double_init",
        "memmap=ondemand alloc_test=0 ondemand_drain=on test_fault=double_init",
        "memmap=ondemand test_fault=pool_overlap alloc_test=0",
        "memmap=ondemand test_fault=list_corrupt",
        "test_fault=double_init",
        "test_fault=panic verify=off memmap=touch",
    ] {
        assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok));
    }
    for f in TestFault::ALL {
        let line = alloc::format!("test_fault={}", f.name());
        if f != TestFault::PoolOverlap {
            assert_eq!(parse(&line).unwrap().test_fault, f, "{line}");
        }
    }
}

#[test]
fn huge_page_keys_repeat_in_order_and_are_read_later() {
    let o = parse(
        "hugepagesz=1G hugepages=2 verify=off hugepagesz=2M hugepages=0:1,1:2 hugetlb_free_vmemmap=bogus",
    )
    .unwrap();
    let got: Vec<(&str, &str)> = o
        .hugetlb
        .iter()
        .map(|p| (p.key.name(), p.value.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("hugepagesz", "1G"),
            ("hugepages", "2"),
            ("hugepagesz", "2M"),
            ("hugepages", "0:1,1:2"),
            ("hugetlb_free_vmemmap", "bogus"),
        ]
    );
    // Any value is taken here: Linux ignores the ones it cannot use with
    // a message, which plan() gives.
    assert!(parse("hugepagesz=3M hugepages= default_hugepagesz=x").is_ok());
    assert_eq!(parse("").unwrap().hugetlb, []);
}
