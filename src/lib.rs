//! hookbox: a self-hosted webhook inbox on one SQLite file.

pub mod activation;
pub mod admin;
pub mod alerts;
pub mod app;
pub mod catchup;
pub mod clock;
pub mod config;
pub mod dispatch;
pub mod edge;
pub mod error;
pub mod health;
pub mod listen;
pub mod maintenance;
pub mod manual;
pub mod metrics;
pub mod notify;
pub mod outbound;
pub mod private_file;
pub mod pull;
pub mod receive;
pub mod route;
pub mod server;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tls;
