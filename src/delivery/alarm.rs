//! What the delivery core tells a person about: a delivery gone dead, a
//! destination paused. Those who notice (the dispatcher, pull nacks and
//! takes, the board) hold an [`Alarm`]; what listens is `crate::alerts`,
//! which implements [`Alarms`] above this module, so delivery never
//! imports the alert task (alerts signs its JSON with dispatch's signer:
//! the other way round would be a cycle).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// What hears of delivery trouble. It must never block or fail: the
/// caller is on the delivery path.
pub trait Alarms: Send + Sync {
    /// A delivery went dead; `error` is its last attempt's.
    fn dead(&self, source: &str, destination: &str, event_id: i64, error: Option<&str>);
    /// `count` deliveries went dead at once (pull nacks, leases run out).
    fn dead_many(&self, source: &str, destination: &str, count: usize);
    /// A destination was paused; `by` is `breaker` or `manual`.
    fn paused(&self, source: &str, destination: &str, by: &'static str);
}

/// A cheap handle to what hears delivery trouble; the default one hears
/// nothing (no `[[alerts]]`, the CLI, tests).
#[derive(Clone)]
pub struct Alarm(Arc<dyn Alarms>);

impl Alarm {
    pub fn new(alarms: impl Alarms + 'static) -> Self {
        Alarm(Arc::new(alarms))
    }
}

struct Silent;

impl Alarms for Silent {
    fn dead(&self, _: &str, _: &str, _: i64, _: Option<&str>) {}
    fn dead_many(&self, _: &str, _: &str, _: usize) {}
    fn paused(&self, _: &str, _: &str, _: &'static str) {}
}

impl Default for Alarm {
    fn default() -> Self {
        Alarm::new(Silent)
    }
}

impl Deref for Alarm {
    type Target = dyn Alarms;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Alarm")
    }
}
