//! `sim-stowage`: the whole `stowage` command line, with the simulated accelerator registered before the CPU.

fn main() -> std::process::ExitCode {
    stowage_driver::cli::main(&[&stowage_example_sim::KIND, &stowage_cpu::KIND])
}
