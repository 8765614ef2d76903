//! The synchronisation primitives the core uses, in one place, so that the model checks
//! (`--cfg subagent_tracker_loom`, in `tests/loom.rs`) can swap in loom's versions and explore every
//! interleaving of the core's own locks and atomics. (Not `--cfg loom`: that would switch tokio-util's
//! internals to loom too.)
//!
//! Outside loom these are `parking_lot`'s mutex and the standard atomics. `Arc` and `Weak` stay the standard
//! ones in both builds: loom has no `Weak`, and reference counts are not where the core's races are.

#[cfg(not(subagent_tracker_loom))]
pub(crate) use parking_lot::{Mutex, RwLock};
#[cfg(not(subagent_tracker_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

#[cfg(subagent_tracker_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

#[cfg(subagent_tracker_loom)]
pub(crate) use loom_mutex::{Mutex, RwLock};

#[cfg(subagent_tracker_loom)]
mod loom_mutex {
    /// loom's mutex with `parking_lot`'s signature: no poisoning, `lock` returns the guard.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        /// Like `parking_lot`'s: the only reference needs no lock.
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }

    /// loom's reader-writer lock with `parking_lot`'s signature.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> RwLock<T> {
            RwLock(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }

        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
}
