//! `cargo tilesmith`: cargo runs it as `cargo-tilesmith tilesmith ARGS`.

fn main() -> std::process::ExitCode {
    tilesmith::main()
}
