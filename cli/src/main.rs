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
    // A program that a backup runs (`--stdin-from-command`) would inherit a raised limit,
    // and some loop over every descriptor up to it; the standard library cannot set it
    // back for the child alone.
    let runs_a_program = matches!(&args.command, args::Command::Backup(b) if b.stdin_from_command);
    if !runs_a_program {
        limits::raise_open_files();
    }
    limits::on_command_thread(args, run)
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
