//! Forgetting finished tasks of a session kept in Redis by age, as the bound on finished tasks evicts them.

use std::time::Duration;

use super::RedisSession;
use crate::RedisTrackerError;

impl RedisSession {
    /// Forgets the finished tasks that ended at least `older_than` ago, as the retention bound evicts them, and
    /// returns how many it forgot (contract §7). Pending tasks are never forgotten.
    ///
    /// # Errors
    /// [`RedisTrackerError::Unavailable`].
    pub async fn forget_finished(&self, older_than: Duration) -> Result<usize, RedisTrackerError> {
        // In microseconds, the precision of the server's clock and of the times it records.
        let older_than_us = older_than.as_micros().to_string();
        // A bounded number per call, as many calls as it takes.
        let mut forgotten = 0;
        loop {
            let (count, more): (usize, i64) = self
                .transition("forget_finished", &[&self.incarnation, &older_than_us])
                .await?;
            forgotten += count;
            if more == 0 {
                return Ok(forgotten);
            }
        }
    }
}
