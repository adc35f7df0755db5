//! `kura`: one binary for every kura job. `main` stays thin: raw arguments from clap, then
//! the command's own checked configuration, then dispatch.

mod args;
mod gateway;
mod keys;
mod limits;
mod progress;
mod repo;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let args = args::Cli::parse();
    limits::raise_open_files();
    // `check`, `ls`, `diff` and `repair snapshots` recurse once per directory level of a
    // snapshot, which may nest `kura_repo::MAX_DEPTH` levels.
    let command = std::thread::Builder::new()
        .name("kura".into())
        .stack_size(limits::COMMAND_STACK)
        .spawn(move || run(args));
    match command.map(std::thread::JoinHandle::join) {
        Ok(Ok(code)) => code,
        // The panic has printed its message.
        Ok(Err(_)) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kura: error: cannot start: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: args::Cli) -> ExitCode {
    let result = match args.command {
        args::Command::Keys(cmd) => keys::run(cmd),
        args::Command::Gateway(args) => gateway::run(*args),
        args::Command::Init(args) => repo::init::run(&args),
        args::Command::Backup(args) => repo::backup::run(&args),
        args::Command::Snapshots(args) => repo::snapshots::run(&args),
        args::Command::Restore(args) => repo::restore::run(&args),
        args::Command::Ls(args) => repo::ls::run(&args),
        args::Command::Diff(args) => repo::diff::run(&args),
        args::Command::Stats(args) => repo::stats::run(&args),
        args::Command::Check(args) => repo::check::run(&args),
        args::Command::Forget(args) => repo::forget::run(&args),
        args::Command::Prune(args) => repo::prune::run(&args),
        args::Command::Repair(args::RepairCommand::Index(args)) => repo::repair::index(&args),
        args::Command::Repair(args::RepairCommand::Snapshots(args)) => {
            repo::repair::snapshots(&args)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kura: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
