//! `memboot-run ARGS...`: run-qemu.sh's host side, with run-qemu.sh's
//! flags (see `memboot_tools::run`); run-qemu.sh builds what is stale and then
//! runs it. `memboot-run build-steps ARGS...` checks ARGS the same way and
//! prints the build steps they need (`memboot_tools::run::build_steps`), for
//! run-qemu.sh to run first.

use std::process::ExitCode;

use memboot_tools::run::args::{Args, Request, USAGE};
use memboot_tools::run::{
    boot, check, dry_run_lines, exit, host_state, note, qemu, qemu_binary, Checked, Paths, Stop,
};

fn main() -> ExitCode {
    let mut argv = std::env::args();
    // run-qemu.sh passes its own name as ours (exec -a), for the log's
    // command line.
    let argv0 = argv.next().unwrap_or_else(|| "run-qemu.sh".into());
    let mut rest: Vec<String> = argv.collect();
    let steps_only = rest.first().map(String::as_str) == Some("build-steps");
    if steps_only {
        rest.remove(0);
    }
    let code = match run(&argv0, &rest, steps_only) {
        Ok(code) => code,
        Err(stop) => {
            note(stop.message());
            stop.exit_code()
        }
    };
    ExitCode::from(code)
}

/// The flags read (`--help` answered: the exit code) and checked against
/// this host, MEMBOOT_QEMU read where `--qemu` is not given.
fn checked_args(argv: &[String], steps_only: bool) -> Result<Result<Checked, u8>, Stop> {
    let args = match Args::parse(argv)? {
        Request::Help if steps_only => return Ok(Err(exit::OK)),
        Request::Help => {
            eprint!("{USAGE}");
            return Ok(Err(exit::USAGE));
        }
        Request::Run(args) => *args,
    };
    let args = Args {
        qemu: qemu_binary::choose(args.qemu, std::env::var(qemu_binary::QEMU_ENV).ok()),
        ..args
    };
    let available = host_state::available().ok_or_else(|| {
        Stop::Setup(format!(
            "cannot read MemAvailable from /proc/meminfo, or {} is not a number of MiB",
            host_state::AVAILABLE_ENV
        ))
    })?;
    Ok(Ok(check(args, &available)?))
}

fn run(argv0: &str, argv: &[String], steps_only: bool) -> Result<u8, Stop> {
    let mut checked = match checked_args(argv, steps_only)? {
        Ok(checked) => checked,
        Err(code) => return Ok(code),
    };
    let booting = !(steps_only || checked.args.dry_run || checked.args.build_only);
    let qemu_version = if booting {
        Some(checked.prepare_qemu()?)
    } else {
        None
    };
    let args = &checked.args;
    if steps_only {
        println!("{}", memboot_tools::run::build_steps(args).join(" "));
        return Ok(exit::OK);
    }
    let paths = Paths::of_this_build();
    if !args.dry_run && args.no_build {
        boot::check_prebuilt(&checked, &paths)?;
    }
    if args.build_only {
        let images = paths.image_dir();
        note(&format!(
            "built {}, {}/memboot-bios.img and memboot-uefi.img",
            paths.boot_elf().display(),
            images.display()
        ));
        return Ok(exit::OK);
    }
    let tmpdir = boot::TempDir::new()?;
    if !args.dry_run && args.boot_path == memboot_tools::run::args::BootPath::Uefi {
        std::fs::copy(qemu::OVMF_VARS, qemu::uefi_vars(tmpdir.path()))
            .map_err(|e| Stop::Setup(format!("{}: {e}", qemu::OVMF_VARS)))?;
    }
    if !args.dry_run && args.linux.is_none() {
        let opts = memboot_tools::run::memboot_opts(&checked, host_state::tsc_khz());
        qemu::write_cmdline_file(tmpdir.path(), &opts)
            .map_err(|e| Stop::Setup(format!("{}: {e}", tmpdir.path().display())))?;
    }
    let profile = match args.profile {
        Some(_) => Some(boot::Profile::new(&checked, &paths, tmpdir.path())?),
        None => None,
    };
    let qemu = memboot_tools::run::qemu_command(
        &checked,
        &paths,
        tmpdir.path(),
        host_state::tsc_khz(),
        profile.as_ref().map(|p| p.plugin_args.as_str()),
    );
    if args.print_cmd {
        eprintln!("{}", memboot_tools::run::quote::quote_words(&qemu));
    }
    if args.dry_run {
        for line in dry_run_lines(&checked) {
            note(&line);
        }
        return Ok(exit::OK);
    }
    let invocation = boot::invocation(argv0, argv);
    let qemu_version = qemu_version.ok_or_else(|| Stop::Setup("no QEMU version read".into()))?;
    boot::run(
        &checked,
        &paths,
        tmpdir.path(),
        &qemu,
        &qemu_version,
        profile.as_ref(),
        &invocation,
    )
}
