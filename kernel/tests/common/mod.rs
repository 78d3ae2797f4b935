//! Replaying real boots on the host: a fixture log (`fixtures/capture.sh`)
//! read back into the machine it describes (its `memboot-input:` line, the
//! pipeline's typed input), and the pipeline run on it with host seams.
#![allow(dead_code)]

/// The log-line parsers of the boot tests (`tools/src/serial_log.rs`), shared:
/// one reader of memboot's lines for both test suites.
#[path = "../../../tools/src/serial_log.rs"]
pub mod log;
pub mod model;
pub mod model_input;

use std::sync::Mutex;

use deferred_init::std_seams::{StdClock, ThreadExecutor};
use deferred_init::{CpuId, Executor};
use memboot_contract::options::Options;
use memboot_kernel::boot_input::BootInput;
use memboot_kernel::pipeline::error::PipelineError;
use memboot_kernel::pipeline::facts::{Facts, MmFacts};
use memboot_kernel::pipeline::fault_hooks::FaultHooks;
use memboot_kernel::pipeline::host_seams::{HostMapper, NotedBringup, VecLog};
use memboot_kernel::pipeline::input::EarlyReservation;
use memboot_kernel::pipeline::input::Input;
use memboot_kernel::pipeline::{self, Machine};
use memboot_kernel::smp_error::SmpError;

/// A boot as its serial log describes it.
pub struct Fixture {
    pub name: &'static str,
    /// What the kernel ran its pipeline on.
    pub input: BootInput,
    /// The command line's options (tests change them to replay the map in
    /// another mode).
    pub opts: Options,
    pub summary: serde_json::Value,
}

pub fn load(name: &'static str) -> Fixture {
    let path = format!("{}/tests/fixtures/{name}.log", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let input = log::boot_input(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let summary = log::summary(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(
        summary["status"], "ok",
        "{name}: the fixture boot succeeded"
    );
    Fixture {
        name,
        opts: model_input::logged_options(&input),
        input,
        summary,
    }
}

impl Fixture {
    pub fn reserve(&self) -> [EarlyReservation; 2] {
        self.input.early_reservations()
    }
    pub fn input<'a>(&'a self, reserve: &'a [EarlyReservation]) -> Input<'a> {
        self.input.pipeline_input(&self.opts, reserve)
    }
    /// The model's input: the fixture's firmware map and options as plain
    /// byte ranges (see `model`), nothing the pipeline computed.
    pub fn model_map(&self) -> model::Map {
        model_input::model_map(&self.input, &self.opts)
    }
    pub fn kernel(&self, key: &str) -> u64 {
        self.summary[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: summary key {key}", self.name))
    }
}

/// Run the whole pipeline as the kernel did; return its facts and log.
pub fn run_on_host(fx: &Fixture) -> (MmFacts, Vec<String>, HostMapper) {
    let (result, mm, lines, mapper) = try_run_on_host(fx);
    result.unwrap_or_else(|e| panic!("{}: host pipeline failed: {e}\n{lines:#?}", fx.name));
    (mm, lines, mapper)
}

/// [`run_on_host`] for runs that may fail: the pipeline's result too.
pub fn try_run_on_host(
    fx: &Fixture,
) -> (Result<(), PipelineError>, MmFacts, Vec<String>, HostMapper) {
    let run = run_on_host_in_full(fx);
    (run.result, run.facts, run.lines, run.mapper)
}

/// Everything a host run of the pipeline leaves.
pub struct HostRun {
    pub result: Result<(), PipelineError>,
    pub facts: MmFacts,
    pub lines: Vec<String>,
    pub mapper: HostMapper,
    /// For each time the pipeline started the other CPUs, the number of
    /// lines it had logged before.
    pub lines_before_cpu_start: Vec<usize>,
    /// For each time the pipeline waited for them, the same.
    pub lines_before_cpu_wait: Vec<usize>,
    /// For each time the pipeline told the log memory is ready, the
    /// number of lines it had logged before.
    pub lines_before_memory_ready: Vec<usize>,
    /// For each job the pipeline ran on every CPU, the number of lines it
    /// had logged before.
    pub lines_before_each_job: Vec<usize>,
}

/// [`ThreadExecutor`], noting how many lines `log` held at each job.
struct NotedExecutor<'a> {
    threads: ThreadExecutor,
    log: &'a VecLog,
    lines_before: Mutex<Vec<usize>>,
}

impl Executor for NotedExecutor<'_> {
    fn nr_cpus(&self) -> usize {
        self.threads.nr_cpus()
    }
    fn on_each_cpu(&self, job: &(dyn Fn(CpuId) + Sync)) {
        let n = self.log.lines().len();
        self.lines_before.lock().unwrap().push(n);
        self.threads.on_each_cpu(job);
    }
}

/// Run the whole pipeline as the kernel did, keeping everything.
pub fn run_on_host_in_full(fx: &Fixture) -> HostRun {
    run_on_host_with_cpus(fx, None)
}

/// [`run_on_host_in_full`] where waiting for the other CPUs fails with
/// `wait_fails`, if given.
pub fn run_on_host_with_cpus(fx: &Fixture, wait_fails: Option<SmpError>) -> HostRun {
    let reserve = fx.reserve();
    let input = fx.input(&reserve);
    let mut mapper = HostMapper::new();
    let (clock, log, facts) = (StdClock::new(), VecLog::default(), Facts::new());
    let executor = NotedExecutor {
        threads: ThreadExecutor::new(fx.input.cpu_nodes.len()),
        log: &log,
        lines_before: Mutex::new(Vec::new()),
    };
    let bringup = NotedBringup::new(&log, wait_fails);
    let machine = Machine {
        mapper: &mut mapper,
        executor: &executor,
        bringup: &bringup,
        clock: &clock,
        log: &log,
        cpu_nodes: &fx.input.cpu_nodes,
    };
    let faults = FaultHooks::new(fx.opts.test_fault);
    let result = pipeline::run(&input, machine, &facts, &faults);
    let mm = facts.with(|f| f.clone()).unwrap();
    HostRun {
        result,
        facts: mm,
        lines: log.lines(),
        lines_before_cpu_start: bringup.lines_before_each_start(),
        lines_before_cpu_wait: bringup.lines_before_each_wait(),
        lines_before_memory_ready: log.lines_before_memory_ready(),
        lines_before_each_job: executor.lines_before.into_inner().unwrap(),
        mapper,
    }
}
