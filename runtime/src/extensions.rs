//! State that a plug-in keeps beside a kernel or a registry (its plan and pick caches, its
//! parsed tables): one value per type, made on first use and shared by the handle's clones, so
//! that the generic handles need not know any plug-in.

use std::any::Any;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub struct Extensions(Mutex<Vec<Arc<dyn Any + Send + Sync>>>);

impl Extensions {
    /// The value of type `T`, made by `init` the first time it is asked for; an `init` that
    /// fails leaves nothing kept, so that the next call tries again.
    pub fn get_or_try_init<T: Any + Send + Sync, E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<Arc<T>, E> {
        let find =
            |kept: &[Arc<dyn Any + Send + Sync>]| kept.iter().find(|v| (***v).is::<T>()).and_then(|v| v.clone().downcast::<T>().ok());
        if let Some(found) = find(&self.0.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(found);
        }
        // Made outside the lock: `init` may ask for other extensions.
        let made = Arc::new(init()?);
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(raced) = find(&kept) {
            return Ok(raced);
        }
        kept.push(made.clone());
        Ok(made)
    }

    /// As [`Extensions::get_or_try_init`], for a value made by `Default`.
    pub fn get<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.get_or_try_init::<T, std::convert::Infallible>(|| Ok(T::default())).unwrap_or_else(|never| match never {})
    }
}
