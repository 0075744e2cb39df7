//! The running service around the parts: [`app`] wires every part together
//! and owns start-up and the order of [`shutdown`]; [`admin`] serves the
//! admin listener (the JSON API, the pull API, `/metrics`, [`health`] and
//! the dashboard); [`maintenance`] runs retention and backup snapshots on
//! their intervals; [`notify`] speaks to systemd.

pub mod admin;
pub mod app;
pub mod health;
pub mod maintenance;
pub mod notify;
pub mod shutdown;
