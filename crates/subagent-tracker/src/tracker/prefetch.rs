//! Asks the processor for memory a later step will read, so that the wait for it overlaps other work.
//!
//! A session that keeps many finished tasks outgrows the caches: each start then waits for main memory at its
//! id's place in the map's table, and each end at the record it evicts, its id and its place in the table,
//! one load after another, since each address is read from the one before. Where a step knows these addresses
//! ahead (an eviction knows the next one's; a start, its id's place before it builds its entry), it fetches
//! them here, without waiting. Addresses are hints only: one that went stale since it was taken (a table that
//! grew, a run since replaced) makes a prefetch useless, never wrong.

/// Asks the processor to bring the cache line at `address` in, without waiting for it; does nothing on other
/// architectures than x86-64, where the speed-up is not had.
#[inline(always)]
pub(crate) fn prefetch(address: usize) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch reads nothing the program sees and never faults, whatever the address (Intel's and AMD's
    // manuals, PREFETCHh); the intrinsic is unsafe only for its target feature, which every x86-64 has.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            std::ptr::without_provenance(address),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
