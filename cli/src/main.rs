//! `tilesmith`.

fn main() -> std::process::ExitCode {
    tilesmith::main()
}
