//! Provider kinds as validation sees them: the facts that decide what a
//! source of that kind may and must say (its name, the default tolerance,
//! whether the signature covers the URL, what a secret of it looks like).
//!
//! Config does not list the kinds: each provider file in `crate::ingress::receive`
//! declares its [`KindFacts`], and the registry there is handed to
//! loading as a [`Kinds`]. So config stays a leaf, and a new provider
//! edits nothing here.

use std::fmt;
use std::time::Duration;

use super::secret::Secret;

/// What one provider kind tells validation.
pub struct KindFacts {
    /// The `kind` value in `[[sources]]`.
    pub name: &'static str,
    /// The window a timestamped kind allows when `tolerance` is not set.
    pub default_tolerance: Duration,
    /// The signature covers the URL the provider called, which hookbox
    /// cannot see behind a proxy: the source needs `public_url`.
    pub signs_url: bool,
    /// Whether a secret of this kind decodes (an encoded key), checked at
    /// load so `hookbox check` names a bad one; the error says what a
    /// valid one looks like and never quotes the value.
    pub check_secret: fn(&Secret) -> Result<(), String>,
    /// A valid secret of this kind, standing in for secrets the commands
    /// that do not verify leave unresolved.
    pub placeholder_secret: &'static str,
}

/// A secret that is valid for every kind whose secrets are not keys of a
/// special shape (the published Standard Webhooks test-vector secret).
pub const PLACEHOLDER_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// [`KindFacts::check_secret`] for kinds that take any non-empty secret.
pub fn any_secret(_: &Secret) -> Result<(), String> {
    Ok(())
}

/// The default window for timestamped kinds that document none.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A kind found among the [`Kinds`]: a source's validated `kind`.
#[derive(Clone, Copy)]
pub struct Kind(&'static KindFacts);

impl Kind {
    pub fn new(facts: &'static KindFacts) -> Self {
        Kind(facts)
    }

    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    pub fn facts(self) -> &'static KindFacts {
        self.0
    }

    /// The window when `tolerance` is not set ([`KindFacts::default_tolerance`]).
    pub fn default_tolerance(self) -> Duration {
        self.0.default_tolerance
    }

    /// See [`KindFacts::signs_url`].
    pub fn signs_url(self) -> bool {
        self.0.signs_url
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Kind {}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// The kinds a config may name: `crate::ingress::receive::registry::PROVIDERS`
/// outside config's own code.
pub trait Kinds {
    /// The kind called `name`, if there is one.
    fn find(&self, name: &str) -> Option<Kind>;
    /// Every kind's name, for the problem that names an unknown one.
    fn names(&self) -> Vec<&'static str>;
}
