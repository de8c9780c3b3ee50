//! The `stowage` command: the driver's CLI over the backends this crate registers. The contract it keeps is in
//! DESIGN.md ("CLI contract").

fn main() -> std::process::ExitCode {
    stowage_driver::cli::main(stowage_cli::BACKENDS)
}
