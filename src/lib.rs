//! hookbox: a self-hosted webhook inbox on one SQLite file.

pub mod app;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod error;
pub mod health;
pub mod receive;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod telemetry;
