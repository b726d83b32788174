//! This repository's own developer tasks; `main.rs` is `cargo xtask`, and `tidy` holds the
//! layout rules that `cargo test -p xtask` enforces.

pub mod tidy;
