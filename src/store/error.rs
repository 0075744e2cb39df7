//! What a write through the writer can come back with, short of success.
//!
//! Its own module so that the writer, the commands it applies and the
//! syncer that answers them all name it without naming each other.

/// Why the writer could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The queue is full: the caller should come back shortly.
    #[error("the writer queue is full")]
    Overloaded,
    /// The database did not commit; the reason is for logs, not clients.
    #[error("the database could not commit: {0}")]
    Unavailable(String),
    /// The writer has stopped (shutdown, or it died).
    #[error("the writer has stopped")]
    Closed,
}
