//! The `stowage` command. The contract it keeps is in DESIGN.md ("CLI contract").

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "stowage", version, about = "Ahead-of-time model compiler: a tensor is moved only when it must be.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile and run a model in-process.
    Run {
        /// The ONNX model.
        model: PathBuf,
    },
    /// Show where every tensor lives, every copy and why, and the memory peak.
    Plan {
        /// The ONNX model.
        model: PathBuf,
    },
    /// Build a standalone executable for a model.
    Build {
        /// The ONNX model.
        model: PathBuf,
    },
    /// List the targets this build of stowage can compile for.
    Targets,
    /// Compile and run a bundled model, and show what ran where and what moved.
    Demo,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let pending = match cli.command {
        Command::Demo => {
            println!("stowage demo: not yet: the bundled model runs once the CPU backend issue lands.");
            println!("The runtime's storage model is in place: see README.md and ARCHITECTURE.md.");
            return ExitCode::SUCCESS;
        }
        Command::Run { .. } => "`stowage run` comes with the CPU backend issue",
        Command::Plan { .. } => "`stowage plan` comes with the planner issue",
        Command::Build { .. } => "`stowage build` comes with the generated binaries issue",
        Command::Targets => "`stowage targets` comes with the CPU backend issue",
    };
    eprintln!("error: not yet: {pending}");
    ExitCode::FAILURE
}
