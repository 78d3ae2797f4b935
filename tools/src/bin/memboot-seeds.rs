//! `memboot-seeds table DIR`: issue 21's seeds table of a `tests/seeds.sh`
//! run (see `memboot_tools::seeds`). `memboot-seeds sparse [REGIONS [REPS]]`:
//! seed 3's host bench (default 8192 regions, 7 repetitions), its result on
//! a `memboot-seeds-sparse:` line. `memboot-seeds sparse-boot REGIONS`:
//! seed 3 as a boot, the guest size on the first line, then the map's
//! `memmap=` forms, one a line; with `--joined`, in one comma-joined
//! `memmap=` word (as Linux's 2048-byte command line needs them). Exit 2 when a run cannot be read, 64 on
//! bad arguments.

use std::path::Path;
use std::process::ExitCode;

use memboot_tools::seeds;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        eprintln!("usage: memboot-seeds table DIR | memboot-seeds sparse [REGIONS [REPS]] | memboot-seeds sparse-boot REGIONS [--joined]");
        ExitCode::from(64)
    };
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["table", dir] => match seeds::table(Path::new(dir)) {
            Ok(t) => {
                print!("{t}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("memboot-seeds: {e}");
                ExitCode::from(2)
            }
        },
        ["sparse", ref rest @ ..] if rest.len() <= 2 => {
            let num =
                |i: usize, default: u64| rest.get(i).map_or(Some(default), |s| s.parse().ok());
            let (Some(regions), Some(reps)) = (num(0, 8192), num(1, 7)) else {
                return usage();
            };
            if regions < 2 || reps == 0 || reps > 1000 {
                return usage();
            }
            match seeds::sparse_bench(regions, reps as u32) {
                Ok(v) => {
                    println!("{}{v}", seeds::SPARSE_PREFIX);
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("memboot-seeds: {e}");
                    ExitCode::from(2)
                }
            }
        }
        ["sparse-boot", regions, ref rest @ ..] if rest.len() <= 1 => {
            let Some(regions) = regions.parse().ok().filter(|&r| r >= 1) else {
                return usage();
            };
            let joined = match rest {
                [] => false,
                ["--joined"] => true,
                _ => return usage(),
            };
            let (size, forms) = seeds::sparse_boot(regions);
            println!("{size}");
            if joined {
                println!("{}", seeds::join_forms(&forms));
            } else {
                for f in forms {
                    println!("{f}");
                }
            }
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}
