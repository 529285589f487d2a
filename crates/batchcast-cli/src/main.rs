//! The `batchcast` command: a thin face over the library crates, one module
//! per command under `cmd/` (docs/commands.md lists them; CI checks that list
//! against `batchcast --help`).
//!
//! Errors reach `main` as `anyhow` errors and leave as one `error:` line and
//! an exit code: 2 when a producer is not found, 3 when it died, 1 otherwise
//! (`consume` also: 4 when refused, 5 when the producer runs as another user).
//! A stdout closed by its reader (`batchcast status | head -1`) ends any
//! command quietly with 0: output goes through [`out::outln!`], which
//! returns that as an error instead of panicking as `println!` does.

#![forbid(unsafe_code)]

mod cmd;
mod out;
mod progress;
mod signals;

use clap::{Parser, Subcommand};

/// Share one data-loading pipeline between many training processes.
#[derive(Parser)]
#[command(name = "batchcast", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what batchcast is for: N trainers with their own pipelines, then
    /// sharing one producer.
    Demo(cmd::demo::DemoArgs),
    /// Serve batches under a name (a producer).
    Serve(cmd::serve::ServeArgs),
    /// Attach to a producer and read (and check) its batches.
    Consume(cmd::consume::ConsumeArgs),
    /// Show running producers and their consumers.
    Status(cmd::status::StatusArgs),
    /// Measure the transport: batches/s, GB/s and overhead per consumer.
    Bench(cmd::bench::BenchArgs),
    /// Run collocated experiments from a plan (or one command) and record
    /// them in the run store.
    Run(cmd::run::RunArgs),
    /// Read the run store: compare runs and workloads.
    Runs(cmd::runs::RunsArgs),
    /// Serve a web dashboard over the run store (local only by default).
    Ui(cmd::ui::UiArgs),
    /// Simulate GPU-cluster scheduling policies over a trace and compare them.
    Sim(cmd::sim::SimArgs),
    /// Find a training script's data stalls (fetch, prep, communication)
    /// and what one shared pipeline would buy: -- python train.py ARGS
    Stalls(cmd::stalls::StallsArgs),
    /// One consumer process of the bench (internal).
    #[command(hide = true)]
    BenchConsumer(cmd::bench::BenchConsumerArgs),
    /// One trainer process of the demo (internal).
    #[command(hide = true)]
    DemoTrainer(cmd::trainer::TrainerArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => cmd::demo::run(a).map(|()| 0),
        Command::DemoTrainer(a) => cmd::trainer::run(a).map(|()| 0),
        Command::Bench(a) => cmd::bench::run(a).map(|()| 0),
        Command::BenchConsumer(a) => cmd::bench::consumer(a).map(|()| 0),
        Command::Serve(a) => cmd::serve::run(a).map(|()| 0),
        Command::Consume(a) => cmd::consume::run(a),
        Command::Status(a) => cmd::status::run(a).map(|()| 0),
        Command::Runs(a) => cmd::runs::run(a).map(|()| 0),
        Command::Run(a) => cmd::run::run(a),
        Command::Ui(a) => cmd::ui::run(a).map(|()| 0),
        Command::Sim(a) => cmd::sim::run(a).map(|()| 0),
        Command::Stalls(a) => cmd::stalls::run(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        // The reader of stdout went away (`batchcast status | head -1`):
        // what it wanted is printed; stop quietly, as other tools do.
        Err(e) if e.is::<out::StdoutClosed>() => std::process::exit(0),
        Err(e) => {
            eprintln!("error: {e:#}");
            let code = match e.downcast_ref::<batchcast::Error>() {
                Some(batchcast::Error::ProducerNotFound { .. }) => 2,
                Some(batchcast::Error::ProducerGone { .. }) => 3,
                _ => 1,
            };
            std::process::exit(code);
        }
    }
}
