// Gens and builds this crate's kernels (variants.toml, kernel-templates/) into OUT_DIR, and
// writes the module that embeds them; reruns when either changes.
fn main() {
    tilesmith_build::script::Script::new().run_or_exit();
}
