//! The run-time flags of `stowage run`, which a built executable takes too: parsed by clap in the CLI (feature
//! `cli`), and by lexopt in built executables, which link no clap.

use std::path::PathBuf;

/// The most kernel threads a run takes (`--threads`, [`crate::model::Model::with_threads`]'s argument). It is fixed
/// rather than derived from the machine, so that a flag means the same wherever an executable runs; it is above
/// the hardware threads of the largest hosts (a few hundred), and beyond the cores more threads only cost memory
/// and start-up time: tens of thousands of them take minutes to start, or exhaust the process's limits.
pub const MAX_THREADS: u32 = 1024;

/// Parses `--threads`: a whole number from 1 to [`MAX_THREADS`].
pub fn parse_threads(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        Ok(n) if n > MAX_THREADS => Err(format!("at most {MAX_THREADS} kernel threads are taken")),
        _ => Err(format!("a whole number from 1 to {MAX_THREADS}")),
    }
}

/// The run-time flags of `stowage run`, which a built executable takes too.
#[derive(Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RunFlags {
    /// An input as a TensorProto file: FILE.pb for the next graph input, or NAME=FILE.pb (repeatable).
    #[cfg_attr(feature = "cli", arg(long = "input", value_name = "FILE.pb|NAME=FILE.pb"))]
    pub inputs: Vec<String>,
    /// Write the outputs as output_0.pb, output_1.pb, … here.
    #[cfg_attr(feature = "cli", arg(long))]
    pub output_dir: Option<PathBuf>,
    /// Write a JSON report (copies, peak memory, timings) here.
    #[cfg_attr(feature = "cli", arg(long))]
    pub report: Option<PathBuf>,
    /// Run this many times (timings report the median).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..)))]
    pub repeat: u32,
    /// Kernel threads (at most 1024).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1, value_parser = parse_threads))]
    pub threads: u32,
}

impl Default for RunFlags {
    fn default() -> Self {
        RunFlags { inputs: Vec::new(), output_dir: None, report: None, repeat: 1, threads: 1 }
    }
}

/// The usage line of a built executable.
pub const EXE_USAGE: &str = "usage: EXECUTABLE [--input FILE.pb | --input NAME=FILE.pb]... [--output-dir DIR] \
                             [--report FILE.json] [--repeat N] [--threads N]";

impl RunFlags {
    /// Parses a built executable's arguments (the program name excluded). `Ok(None)`: `--help` was asked for.
    pub fn parse_exe(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Option<RunFlags>, String> {
        use lexopt::prelude::*;
        let mut flags = RunFlags::default();
        let mut parser = lexopt::Parser::from_args(args);
        let count = |flag: &str, v: std::ffi::OsString| -> Result<u32, String> {
            let text = v.to_string_lossy().into_owned();
            match text.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!("invalid value '{text}' for '--{flag} <N>': a whole number of at least 1")),
            }
        };
        while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
            match arg {
                Long("input") => flags.inputs.push(parser.value().map_err(|e| e.to_string())?.to_string_lossy().into()),
                Long("output-dir") => flags.output_dir = Some(parser.value().map_err(|e| e.to_string())?.into()),
                Long("report") => flags.report = Some(parser.value().map_err(|e| e.to_string())?.into()),
                Long("repeat") => flags.repeat = count("repeat", parser.value().map_err(|e| e.to_string())?)?,
                Long("threads") => {
                    let text = parser.value().map_err(|e| e.to_string())?.to_string_lossy().into_owned();
                    flags.threads =
                        parse_threads(&text).map_err(|e| format!("invalid value '{text}' for '--threads <N>': {e}"))?;
                }
                Short('h') | Long("help") => return Ok(None),
                other => return Err(other.unexpected().to_string()),
            }
        }
        Ok(Some(flags))
    }
}
