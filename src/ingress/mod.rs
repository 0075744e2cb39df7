//! The way in: the listeners, the public listener's TLS, the sockets
//! systemd hands over, and the receive path that verifies and stores what
//! providers post.
//!
//! [`server`] runs the accept loop of both listeners, with [`tls`] on the
//! public one when configured and sockets from [`activation`] under
//! systemd. [`receive`] serves `/hooks/{source}`: after [`crate::edge`] has
//! let the request in, it reads the body, verifies it with the source's
//! provider (one file per kind) and hands the event to the store.

pub mod activation;
pub mod receive;
pub mod server;
pub mod tls;
