//! What can go wrong, as values: the runtime never panics on bad input or a missing GPU.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no tilesmith registry found; looked in {}", looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", then "))]
    RegistryNotFound { looked: Vec<PathBuf> },

    #[error("no registry given: pass its folder to Registry::open, set {var} to it, or embed one with tilesmith-build and open it with Registry::embedded (`tilesmith build` writes one in the project's registry/)")]
    NoRegistryGiven { var: &'static str },

    #[error("{var} points to {}, {problem}", path.display())]
    RegistryVariable { var: &'static str, path: PathBuf, problem: &'static str },

    #[error("cannot read the registry at {}: {reason}", path.display())]
    RegistryUnreadable { path: PathBuf, reason: String },

    #[error("unknown kernel `{name}`{}", suggest(closest))]
    UnknownKernel { name: String, closest: Vec<String> },

    #[error("no CUDA driver: {0}")]
    NoDriver(String),

    #[error("no GPU: {0}")]
    NoGpu(String),

    #[error(
        "kernel `{name}` has no code for this GPU: it has {has}, and {device} is sm_{major}{minor} \
         (build for it with `--arch sm_{major}{minor}` where its backend targets it)"
    )]
    NoCodeForDevice { name: String, has: String, device: String, major: u32, minor: u32 },

    #[error("unknown family `{name}`; the registry has {}", known.join(", "))]
    UnknownFamily { name: String, known: Vec<String> },

    #[error("family `{family}` refused the call: {rule}")]
    NoFamilyVariant { family: String, rule: String },

    /// From a plug-in's dispatcher: `what` names its family's calls.
    #[error("no variant takes this {what} call: {rule}")]
    NoVariant { what: &'static str, rule: String },

    #[error("kernel `{name}` refused the launch: {rule}")]
    Refused { name: String, rule: String },

    #[error("CUDA error while {what}: {source}")]
    Cuda { what: String, source: cudarc::driver::DriverError },
}

fn suggest(closest: &[String]) -> String {
    if closest.is_empty() {
        String::new()
    } else {
        format!("; closest: {}", closest.join(", "))
    }
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(source: cudarc::driver::DriverError) -> Self {
        Error::Cuda { what: "calling the driver".into(), source }
    }
}

/// Attaches what was being done to a driver error.
pub(crate) trait Context<T> {
    fn during(self, what: &str) -> Result<T, Error>;
}

impl<T> Context<T> for Result<T, cudarc::driver::DriverError> {
    fn during(self, what: &str) -> Result<T, Error> {
        self.map_err(|source| Error::Cuda { what: what.to_string(), source })
    }
}
