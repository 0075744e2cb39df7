//! Small pieces every part of hookbox uses, each too small to be a part of
//! its own: the wall clock, the answers that are not "stored", excerpts of
//! text, the outbound HTTP client's settings, and files only hookbox's user
//! may read. Like [`crate::config`] and [`crate::signature`], nothing here
//! imports the rest of the crate.

pub mod clock;
pub mod error;
pub mod excerpt;
pub mod outbound;
pub mod private_file;
